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


# The settings that say what a run trains on and how; a resumed run must keep them. The rest
# may change between attempts: num_updates, max_wall_s, threads, faults, evaluation, and the
# lag bound (an async run may go on synchronously, at max_lag 0).
RUN_DEFINING = ("model", "init_from", "seed", "matched_kernels", "env.id", "env.kwargs",
                "env.agent", "env.split", "env.max_tasks", "rollout", "loss", "learner.lr",
                "learner.betas", "learner.weight_decay", "learner.adam_eps", "learner.max_grad_norm",
                "pipeline.groups_per_update", "pipeline.dynamic_sampling")


def changed_run_settings(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: old -> new` for each run-defining setting that differs between the config a run
    was started with (its config.yaml) and the one resuming it."""
    changes = []
    for key in RUN_DEFINING:
        old, new = _lookup(saved, key), _lookup(current, key)
        if isinstance(old, list) or isinstance(new, list):
            old, new = _plain(old), _plain(new)
        if old != new:
            changes.append(f"{key}: {old!r} -> {new!r}")
    return changes


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _plain(value: Any) -> Any:
    """YAML gives lists where the config has tuples."""
    return [_plain(v) for v in value] if isinstance(value, list | tuple) else value
