"""`FormatPenalty`: a training reward that also counts turns the env could not act on.

A task's reward says only whether the final answer was right. After a short SFT a small model
often writes a tool call the env cannot run (a string left open, a repetition loop cut at the
token limit) and then fails the task like a model that ran wrong code; both score 0, so a group
of failures is flat and teaches nothing about the call format. With `penalty` > 0 each turn that
runs no tool and gives no answer costs `penalty`: such a group has reward variance again, and
its gradient favours the episodes whose calls ran. It shapes training only; evaluation scores
the task's reward alone, and `info["format_penalty"]` says what a step was charged.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from envs.tool_env import ToolEnv


def acted(info: dict[str, Any]) -> bool:
    """Whether a step ran at least one tool or gave a final answer (`ToolEnv`'s step info)."""
    return bool(info.get("tool_calls")) or info.get("answer") is not None


class FormatPenalty(gymnasium.Wrapper):
    """Subtracts `penalty` from the reward of every step on which the model ran no tool and gave
    no answer: a malformed call, a call cut off at the token limit, or plain text."""

    def __init__(self, env: gymnasium.Env, penalty: float) -> None:
        if penalty < 0:
            raise ValueError(f"format_penalty must be at least 0, got {penalty}")
        if not isinstance(env.unwrapped, ToolEnv):
            raise ValueError(
                f"format_penalty reads a ToolEnv's step info (which tools ran); "
                f"{type(env.unwrapped).__name__} is not a ToolEnv, so every step would be charged")
        super().__init__(env)
        self.penalty = penalty

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        charge = 0.0 if acted(info) else self.penalty
        return observation, reward - charge, terminated, truncated, {**info, "format_penalty": charge}
