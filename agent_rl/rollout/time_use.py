"""Where a rollout actor's time goes: decoding, waiting on envs, or idle.

Asynchrony pays by filling the time one episode waits on its env with decoding for others, so
the pipeline bench reports this split beside the learner's busy share. The clock starts at the
actor's first group (engine start-up is not the run's time) and switches state only when an
episode or a sampling call starts or ends: a few operations per turn, none per token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["TimeUse"]


@dataclass
class TimeUse:
    """Seconds spent decoding (at least one sampling call in the engine), waiting on envs
    (episodes running, none of them sampling) and idle (no episode running)."""

    decoding_s: float = 0.0
    env_wait_s: float = 0.0
    idle_s: float = 0.0
    sampling: int = 0
    episodes: int = 0
    _since: float | None = field(default=None, repr=False)

    def change(self, sampling: int = 0, episodes: int = 0) -> None:
        """Book the time since the last change to the state it was in, then apply the deltas."""
        now = time.monotonic()
        if self._since is not None:
            elapsed = now - self._since
            if self.sampling:
                self.decoding_s += elapsed
            elif self.episodes:
                self.env_wait_s += elapsed
            else:
                self.idle_s += elapsed
        self._since = now
        self.sampling += sampling
        self.episodes += episodes

    def snapshot(self) -> dict[str, float]:
        """The totals so far, the current state's time included."""
        if self._since is not None:
            self.change()
        return {"decoding_s": self.decoding_s, "env_wait_s": self.env_wait_s,
                "idle_s": self.idle_s}
