"""Policies that need no model: replaying scripted turns, and an oracle that uses the tools.

A policy is any callable from the conversation so far to the next assistant turn. These two
drive the CLI's `agent-rl env run`, the tests and the benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from envs.spaces import Message
from envs.tool_calls import format_tool_call
from envs.tools import ANSWER_TOOL_NAME

__all__ = [
    "OraclePolicy",
    "Policy",
    "PolicyExhaustedError",
    "ScriptedPolicy",
    "load_script",
]

Policy = Callable[[list[Message]], str]
TURN_SEPARATOR = "\n---\n"


class PolicyExhaustedError(RuntimeError):
    """A scripted policy was asked for more turns than its script holds."""


class ScriptedPolicy:
    """Replays fixed assistant turns in order, whatever the observations."""

    def __init__(self, turns: Iterable[str]):
        self.turns = list(turns)
        self.position = 0

    def __call__(self, messages: list[Message]) -> str:
        if self.position >= len(self.turns):
            raise PolicyExhaustedError(
                f"the script has {len(self.turns)} turns and the episode wants turn "
                f"{self.position + 1}; add turns or lower max_turns"
            )
        turn = self.turns[self.position]
        self.position += 1
        return turn


def load_script(path: str | Path) -> ScriptedPolicy:
    """Read scripted turns: JSONL (one JSON string or {"content": ...} per line) or plain text
    with turns separated by lines holding only `---`."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        turns = []
        for line in text.splitlines():
            if line.strip():
                item = json.loads(line)
                turns.append(item["content"] if isinstance(item, dict) else str(item))
        return ScriptedPolicy(turns)
    return ScriptedPolicy(turn.strip("\n") for turn in text.split(TURN_SEPARATOR))


class OraclePolicy:
    """Solves a task the intended way: run its `oracle_code` with the python tool, then answer
    with the printed result (code tasks answer with the reference solution). A task without
    `oracle_code` (an env of your own) is answered with its reference `answer` straight away,
    which checks that the env's reward function accepts its own answers."""

    def __init__(self, task: Mapping[str, Any]):
        extra = task.get("extra") or "{}"
        extra = json.loads(extra) if isinstance(extra, str) else dict(extra)
        self.task = dict(task)
        self.oracle_code = extra.get("oracle_code")
        self.turns_taken = 0

    def __call__(self, messages: list[Message]) -> str:
        self.turns_taken += 1
        if self.oracle_code is None:
            return format_tool_call(ANSWER_TOOL_NAME, {ANSWER_TOOL_NAME: str(self.task["answer"])})
        if self.turns_taken == 1:
            return "Let me compute this with Python.\n" + format_tool_call(
                "python", {"code": self.oracle_code}
            )
        if self.task["verifier"] == "unit_tests":
            final = self.task["answer"]
        else:
            output = messages[-1]["content"] if messages else ""
            final = output.strip().splitlines()[-1] if output.strip() else ""
        return format_tool_call(ANSWER_TOOL_NAME, {ANSWER_TOOL_NAME: final})
