"""`agent_rl/Parity-v0`: a one-turn env whose reward a random model earns half the time.

For testing training pipelines with untrained models: the reward is 1 when the reply has an even
number of characters, so a random-weight model's groups have reward variance and the learner
takes real gradient steps (on tool tasks such a model never scores, every group is flat, and the
weights never move). Its `dataset` holds named tasks per split (64 train, 16 held out), all with
the same prompt: the task row chosen by `options["task"]` only names the episode. The other
keyword arguments a trainer passes every env (`categories`, `max_turns`, ...) are accepted and
ignored, so it drops into any run config as `env: agent_rl/Parity-v0`.
"""

from __future__ import annotations

from typing import Any

import gymnasium

from envs.spaces import AssistantText, Message, MessagesSpace

PROMPT = "Say something."
MAX_REPLY_CHARS = 100_000
SPLIT_SIZES = {"train": 64, "heldout": 16}


class ParityEnv(gymnasium.Env[list[Message], str]):
    """One user message, one reply, reward 1.0 for an even character count, else 0.0."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, split: str = "train", render_mode: str | None = None, **_: Any) -> None:
        if split not in SPLIT_SIZES:
            raise ValueError(f"split must be one of {sorted(SPLIT_SIZES)}, got {split!r}")
        self.dataset = [{"task_id": f"parity-{split}-{index}", "prompt": PROMPT, "answer": "",
                         "category": "parity"} for index in range(SPLIT_SIZES[split])]
        self.render_mode = render_mode
        self.action_space = AssistantText(max_length=MAX_REPLY_CHARS)
        self.observation_space = MessagesSpace()
        self._task_id = "parity"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        task = (options or {}).get("task")
        self._task_id = str(task.get("task_id", "parity")) if isinstance(task, dict) else "parity"
        return [{"role": "user", "content": PROMPT}], {"task_id": self._task_id, "category": "parity"}

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        reward = 1.0 if len(action) % 2 == 0 else 0.0
        info = {"task_id": self._task_id, "category": "parity", "end_reason": "answer"}
        return [], reward, True, False, info
