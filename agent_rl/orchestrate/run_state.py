"""What a resumed run needs besides the learner: the ledger, the data position and the groups
generated but not yet trained. Plain data (no torch), so the scheduler stays light."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_rl.orchestrate.ledger import Ledger
from agent_rl.trajectory import Group


@dataclass
class RunState:
    """Everything besides the learner that a resumed run needs."""

    next_task_index: int = 0
    in_flight_task_indices: list[int] = field(default_factory=list)
    queued_groups: list[Group] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)

    def to_dict(self) -> dict[str, Any]:
        return {
            "next_task_index": self.next_task_index,
            "in_flight_task_indices": sorted(self.in_flight_task_indices),
            "queued_groups": [group.to_dict() for group in self.queued_groups],
            "ledger": self.ledger.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        return cls(
            next_task_index=data["next_task_index"],
            in_flight_task_indices=list(data["in_flight_task_indices"]),
            queued_groups=[Group.from_dict(group) for group in data["queued_groups"]],
            ledger=Ledger.from_dict(data["ledger"]),
        )
