"""The format penalty charges exactly the turns a ToolEnv could not act on, only in training, and
the episode record keeps it, the tool calls and the stale turns of every step (not just the last)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import gymnasium
import pytest
from transformers import AutoTokenizer

from agent_rl.env_config import EnvConfig
from agent_rl.rollout.episode import EnvThreads, SampledTurn, run_episode
from agent_rl.trajectory import LAG0_EXCLUDED_TURNS
from envs.format_penalty import FormatPenalty
from envs.loading import make_env

ENV = "agent_rl/WordCount-v0"


def _call(name: str, arguments: dict) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def _answer_of(env) -> str:
    return env.unwrapped.task["answer"]


def test_turns_that_run_no_tool_are_charged_and_the_rest_are_not():
    env = make_env(ENV, split="train", format_penalty=0.1)
    env.reset(seed=0)
    turns = {
        "cut off": '<tool_call>{"name": "count_words", "arguments": {"text": "a b',
        "bad json": '<tool_call>{"name": "count_words", "arguments": {"text": "a b"}</tool_call>',
        "plain text": "I think it is five.",
        "tool ran": _call("count_words", {"text": "a b"}),
    }
    charges = {}
    for name, action in turns.items():
        _, reward, _, _, info = env.step(action)
        charges[name] = (reward, info["format_penalty"])
    assert charges == {"cut off": (-0.1, 0.1), "bad json": (-0.1, 0.1),
                       "plain text": (-0.1, 0.1), "tool ran": (0.0, 0.0)}
    _, reward, terminated, _, info = env.step(_call("answer", {"answer": _answer_of(env)}))
    assert (reward, terminated, info["format_penalty"]) == (1.0, True, 0.0)


def test_no_penalty_leaves_the_env_unwrapped_and_a_bad_one_is_refused():
    assert not isinstance(make_env(ENV, split="train"), FormatPenalty)
    with pytest.raises(ValueError, match="at least 0"):
        FormatPenalty(make_env(ENV, split="train"), -0.1)
    with pytest.raises(ValueError, match="not a ToolEnv"):
        FormatPenalty(gymnasium.make("CartPole-v1"), 0.1)


def test_only_the_training_split_is_charged():
    config = EnvConfig(id=ENV, format_penalty=0.1)
    assert config.make_kwargs("train")["format_penalty"] == 0.1
    assert "format_penalty" not in config.make_kwargs("heldout")
    assert "format_penalty" not in EnvConfig(id=ENV).make_kwargs("train")


def test_the_episode_keeps_totals_over_all_its_steps(tiny_model: Path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    env_threads = EnvThreads(2)
    task = make_env(ENV, split="train").unwrapped.dataset[0]
    turns = ['<tool_call>{"name": "count_words"',  # cut off: charged
             _call("count_words", {"text": "a b c"}),
             _call("answer", {"answer": task["answer"]})]

    async def sample_turn(token_ids: list[int], room: int, seed: int | None) -> SampledTurn:
        ids = [*tokenizer.encode(turns.pop(0), add_special_tokens=False), stop]
        fresh = len(turns) != 1  # the second turn's prefill predates its weights
        return SampledTurn(ids, [0.0] * len(ids), [0] * len(ids), "stop", stop, fresh)

    try:
        record = asyncio.run(run_episode(
            sample_turn, env_threads, lambda: make_env(ENV, split="train", format_penalty=0.25),
            task, seed=0, tokenizer=tokenizer, context_budget=2048))
    finally:
        env_threads.shutdown()
    info = record.to_trajectory("g", {}).info
    assert record.end_reason == "terminated"
    assert record.reward == pytest.approx(0.75)
    assert info["format_penalty_total"] == 0.25
    assert info["tool_calls_total"] == 1
    assert len(info[LAG0_EXCLUDED_TURNS]) == 1
    assert info["end_reason"] == "answer"
