"""Run one whole episode of an env with a policy and keep the transcript."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium

from envs.policies import Policy, PolicyExhaustedError
from envs.spaces import Message

__all__ = ["EpisodeRecord", "run_episode"]


@dataclass
class EpisodeRecord:
    """The full conversation of an episode and how it ended."""

    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    reset_info: dict[str, Any] = field(default_factory=dict)
    step_infos: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why the episode ended before the env ended it (a script ran out)

    @property
    def turns(self) -> int:
        return len(self.step_infos)


def run_episode(
    env: gymnasium.Env, policy: Policy, task: Any = None, seed: int | None = None
) -> EpisodeRecord:
    """Reset `env` on `task` (a row, index, task id, or None to draw one) and step to the end;
    a scripted policy that runs out of turns ends the episode early (`stopped` says so)."""
    options = {"task": task} if task is not None else None
    messages, info = env.reset(seed=seed, options=options)
    record = EpisodeRecord(messages=list(messages), reset_info=info)
    while not (record.terminated or record.truncated):
        try:
            action = policy(list(record.messages))
        except PolicyExhaustedError as error:  # keep the transcript so far
            record.stopped = str(error)
            break
        record.messages.append({"role": "assistant", "content": action})
        observation, reward, terminated, truncated, info = env.step(action)
        record.messages.extend(observation)
        record.reward += float(reward)
        record.terminated, record.truncated = terminated, truncated
        record.step_infos.append(info)
    return record
