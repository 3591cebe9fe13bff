"""A small real tool environment for the rollout tests (this file holds no tests).

It follows the agent_rl env reset/step contract.

Not a stand-in for vLLM or for the PythonTool env: it is a complete (if trivial) tool env whose
behaviour the tests choose through the task dict, so they can force long tool outputs, env errors
or a pause between turns.
"""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = "You are a counting agent. Call the `count` tool; answer when you are done."


class CounterToolEnv:
    """Description: every assistant turn is answered by a `count` tool result.

    Action: the assistant's text. Observation: one tool message "count=N" padded with `tool_chars`
    characters of filler. Reward: 1.0 when the episode ends after `turns` turns. Episode end:
    terminated after `turns` turns; never if `turns` is 0 (for context-budget tests); `mode`
    "raise" makes step raise. Arguments: none; everything comes from `options["task"]`.
    """

    def __init__(self, log: list[CounterToolEnv] | None = None) -> None:
        self.task: dict[str, Any] = {}
        self.actions: list[str] = []
        self.closed = False
        if log is not None:
            log.append(self)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.task = dict((options or {}).get("task") or {})
        self.actions = []
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self.task.get("prompt", "Count to three.")},
        ]
        info = {"task_id": self.task.get("task_id", "count-0"), "category": "counting"}
        return messages, info

    def step(
        self, action: str
    ) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        if self.task.get("mode") == "raise":
            raise RuntimeError("the counter tool crashed")
        self.actions.append(action)
        gate = self.task.get("gate")
        if gate is not None and len(self.actions) == 1:
            gate["reached"].set()
            gate["release"].wait(timeout=60)
        turns = int(self.task.get("turns", 2))
        done = turns > 0 and len(self.actions) >= turns
        content = f"count={len(self.actions)}" + "x" * int(self.task.get("tool_chars", 0))
        reply = [{"role": "tool", "name": "count", "content": content}]
        return reply, 1.0 if done else 0.0, done, False, {"count": len(self.actions)}

    def close(self) -> None:
        self.closed = True
