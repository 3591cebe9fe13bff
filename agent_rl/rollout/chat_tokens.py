"""Rendering chat messages to token ids incrementally, the way the chat template would.

A trajectory is built by appending ids, never by re-tokenizing what came before: the opening is
rendered and tokenized once, the model's sampled ids are kept as they are, and each environment
turn adds only the ids of the text the template would insert after the assistant's message (the
rest of the assistant's closing, the new messages and the next generation prompt). That text is
found by rendering the conversation with and without the new messages and taking the difference,
so any append-only chat template works without knowing its markup.

`EpisodeTokens` is that recipe for a whole episode. The rollout feeds it the ids it sampled;
supervised fine-tuning feeds it the ids of written demonstration turns (`ChatTokens.turn_ids`).
Both get their ids from it, so SFT trains on exactly the tokens RL will later sample and score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_rl.errors import UserError

Message = dict[str, Any]

_SENTINEL = "\x00agent-rl-sentinel\x00"


class ChatTemplateError(UserError, ValueError):
    """A chat template this module cannot extend turn by turn (it rewrites earlier turns)."""


class ChatTokens:
    """Turns messages into token ids with a tokenizer's chat template, one turn at a time.

    Args:
        tokenizer: a Hugging Face tokenizer that carries a chat template.
        tools: JSON tool schemas passed to templates that render them (`tools=`); None for none.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"tokenizer {type(tokenizer).__name__} has no chat template; use a checkpoint "
                "whose tokenizer_config.json or chat_template.jinja defines one"
            )
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        # A template that renders image parts names them; a text-only one would print the
        # parts' Python repr into the prompt.
        self.takes_images = "image" in str(tokenizer.chat_template)
        self._assistant_closing = self._find_assistant_closing()

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        """The template's text for `messages`, optionally followed by the assistant's header."""
        if not self.takes_images and any(_has_image(message) for message in messages):
            raise ChatTemplateError(
                "the environment sent an image (e.g. the desktop's observation='screenshot' or "
                "'both'), but this model's chat template takes text only; use "
                "observation='text' or a vision-language model whose template renders images"
            )
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=self.tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        """Ids of template text; special tokens come from the text itself, none are added."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def opening_ids(self, messages: Sequence[Message]) -> list[int]:
        """Ids of the opening messages followed by the generation prompt for the first turn."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of sampled ids as the environment should read it (special tokens dropped)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def turn_ids(self, text: str) -> list[int]:
        """Ids of a written assistant turn as the model would sample it: its text, then the
        stop token that ends a turn (the first token of the assistant closing)."""
        return self.encode(text) + [self.stop_token_id]

    @property
    def stop_token_id(self) -> int:
        """The token a model emits to end its turn (e.g. <|im_end|>)."""
        return self.encode(self._assistant_closing)[0]

    @property
    def assistant_closing(self) -> str:
        """What the template writes after an assistant message's content (e.g. '<|im_end|>\\n')."""
        return self._assistant_closing

    def continuation_ids(
        self,
        history: Sequence[Message],
        new_messages: Sequence[Message],
        closed_by: str | None,
    ) -> list[int]:
        """Ids to feed after a sampled assistant turn so the sequence reads as the template would.

        Args:
            history: every message so far, ending with the assistant message just sampled.
            new_messages: the environment's reply (tool results or user feedback).
            closed_by: the text of the stop token the model ended its turn with (it is already in
                the sequence, as a sampled token), or None if the turn was cut off before it.
        """
        if not history or history[-1].get("role") != "assistant":
            raise ValueError("history must end with the assistant message that was just sampled")
        closing = self._assistant_closing
        if closed_by and closing.startswith(closed_by):
            rest_of_closing = closing[len(closed_by) :]
        else:
            rest_of_closing = closing
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *new_messages], add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError(
                "the chat template rewrites earlier turns when messages are appended (rendering "
                f"with the new messages does not start with the old text; first difference at "
                f"char {_first_difference(before, after)}); incremental token ids need an "
                "append-only template"
            )
        return self.encode(rest_of_closing + after[len(before) :])

    def _find_assistant_closing(self) -> str:
        user = {"role": "user", "content": "hi"}
        prefix = self.render([user], add_generation_prompt=True)
        full = self.render([user, {"role": "assistant", "content": _SENTINEL}], False)
        if not full.startswith(prefix) or _SENTINEL not in full:
            raise ChatTemplateError(
                "the chat template does not render an assistant message right after its "
                "generation prompt; incremental token ids need an append-only template"
            )
        return full[full.index(_SENTINEL) + len(_SENTINEL) :]


def _has_image(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in ("image", "image_url") for part in content)


class EpisodeTokens:
    """The token ids of one episode, built turn by turn as the rollout builds them.

    Args:
        chat: the renderer (tokenizer, template and tool schemas).
        opening: the messages `env.reset` returned.
    """

    def __init__(self, chat: ChatTokens, opening: Sequence[Message]) -> None:
        self.chat = chat
        self.history: list[Message] = list(opening)
        self.opening_ids = chat.opening_ids(self.history)
        self._closed_by: str | None = None

    def add_assistant(self, token_ids: Sequence[int], stop_token: int | None) -> str:
        """Record an assistant turn (its ids end with `stop_token` unless it was cut off) and
        return its text as the environment should read it."""
        spoken = token_ids[:-1] if stop_token is not None else token_ids
        text = self.chat.decode(spoken)
        self.history.append({"role": "assistant", "content": text})
        self._closed_by = (
            self.chat.tokenizer.decode([stop_token]) if stop_token is not None else None
        )
        return text

    def add_env(self, messages: Sequence[Message]) -> list[int]:
        """Record the environment's reply; returns the ids that follow the assistant's turn."""
        ids = self.chat.continuation_ids(self.history, messages, self._closed_by)
        self.history.extend(messages)
        return ids


def _first_difference(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
