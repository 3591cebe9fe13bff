"""Incremental chat-template token ids, with the real SmolLM2 tokenizer and template."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from agent_rl.rollout.chat_tokens import ChatTemplateError, ChatTokens

OPENING = [
    {"role": "system", "content": "Use the python tool."},
    {"role": "user", "content": "What is 6 * 7?"},
]
TOOL_REPLY = [{"role": "tool", "name": "python", "content": "42\n"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_opening_ids_are_the_rendered_template_with_generation_prompt(tokenizer) -> None:
    chat = ChatTokens(tokenizer)
    ids = chat.opening_ids(OPENING)
    assert tokenizer.decode(ids) == chat.render(OPENING, add_generation_prompt=True)
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


def test_continuation_after_a_closed_turn_rebuilds_the_full_template(tokenizer) -> None:
    chat = ChatTokens(tokenizer)
    answer = '<tool_call>{"name": "python", "arguments": {"code": "6*7"}}</tool_call>'
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = tokenizer(answer, add_special_tokens=False)["input_ids"] + [im_end]
    history = [*OPENING, {"role": "assistant", "content": answer}]

    reply = chat.continuation_ids(history, TOOL_REPLY, closed_by="<|im_end|>")
    ids = chat.opening_ids(OPENING) + sampled + reply

    expected = chat.render([*history, *TOOL_REPLY], add_generation_prompt=True)
    assert tokenizer.decode(ids) == expected
    assert tokenizer.decode(reply).startswith("\n<|im_start|>tool\n")


def test_continuation_after_a_cut_off_turn_closes_it_first(tokenizer) -> None:
    chat = ChatTokens(tokenizer)
    answer = "I will compute"
    sampled = tokenizer(answer, add_special_tokens=False)["input_ids"]
    history = [*OPENING, {"role": "assistant", "content": answer}]

    reply = chat.continuation_ids(history, TOOL_REPLY, closed_by=None)

    assert tokenizer.decode(reply).startswith("<|im_end|>\n<|im_start|>tool")
    ids = chat.opening_ids(OPENING) + sampled + reply
    assert tokenizer.decode(ids) == chat.render([*history, *TOOL_REPLY], True)


def test_assistant_closing_is_found_from_the_template(tokenizer) -> None:
    assert ChatTokens(tokenizer).assistant_closing == "<|im_end|>\n"


def test_template_that_rewrites_earlier_turns_is_rejected(tiny_model: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    history = [*OPENING, {"role": "assistant", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match="append-only template"):
        ChatTokens(tokenizer).continuation_ids(history, TOOL_REPLY, closed_by="<|im_end|>")


def test_tokenizer_without_template_is_rejected(tiny_model: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatTokens(tokenizer)
