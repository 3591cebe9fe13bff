"""Bookkeeping of every group a run produced: generated, trained on, dropped (by reason), re-run.

An asynchronous pipeline has many places to lose or double-count data (a queue, in-flight
rollouts, a crash between two checkpoints). The ledger is the audit: each group id is generated
once, then either trained on exactly once or dropped with a reason, and `check` proves
generated = trained + dropped (+ the groups still waiting in the queue) at every checkpoint and at
the end of the run. It is saved inside every checkpoint, so a resumed run continues the audit.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_rl.errors import UserError

LEDGER_FILE = "ledger.json"
# Drop reason of a group dynamic sampling filtered out: all its rewards were equal, so it has no
# gradient and the learner never sees it.
FLAT_FILTERED = "flat_filtered"


class LedgerError(UserError, RuntimeError):
    """A group was counted twice or lost: the pipeline's bookkeeping has a bug."""


@dataclass
class Ledger:
    generated: set[str] = field(default_factory=set)
    # In training order, so a resumed run can be compared group for group with an unbroken one.
    trained: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # group id -> reason
    rerun: dict[str, str] = field(default_factory=dict)  # group id -> why it was generated again
    zero_variance: set[str] = field(default_factory=set)  # trained, but all rewards equal

    def __post_init__(self) -> None:
        self._trained_set = set(self.trained)

    def record_generated(self, group_id: str) -> None:
        if group_id in self.generated:
            raise LedgerError(f"group {group_id} was generated twice; group ids must be unique")
        self.generated.add(group_id)

    def record_trained(self, group_id: str, zero_variance: bool = False) -> None:
        self._check_open(group_id, "train on")
        self.trained.append(group_id)
        self._trained_set.add(group_id)
        if zero_variance:
            self.zero_variance.add(group_id)

    def record_dropped(self, group_id: str, reason: str) -> None:
        self._check_open(group_id, "drop")
        self.dropped[group_id] = reason

    def record_rerun(self, group_id: str, reason: str = "resume") -> None:
        """A group generated again: it was in flight at the last checkpoint ("resume"), or its
        rollout actor died under it ("actor_died"). Its id stays; it is counted once."""
        self.rerun[group_id] = reason

    def _check_open(self, group_id: str, action: str) -> None:
        if group_id not in self.generated:
            raise LedgerError(f"cannot {action} group {group_id}: it was never generated")
        if group_id in self._trained_set:
            raise LedgerError(f"cannot {action} group {group_id}: it was already trained on")
        if group_id in self.dropped:
            raise LedgerError(
                f"cannot {action} group {group_id}: it was dropped ({self.dropped[group_id]})"
            )

    def check(self, pending: set[str] | frozenset[str] = frozenset()) -> None:
        """Raise unless generated = trained + dropped + pending, with the three parts disjoint.

        `pending` is the ids generated but still waiting in the queue (empty at the end of a run).
        """
        dropped = set(self.dropped)
        trained = self._trained_set
        if len(trained) != len(self.trained):
            raise LedgerError("a group appears twice in the trained list")
        overlaps = (trained & dropped) | (trained & pending) | (dropped & pending)
        if overlaps:
            raise LedgerError(f"groups both trained/dropped/pending: {sorted(overlaps)[:10]}")
        accounted = trained | dropped | set(pending)
        lost = self.generated - accounted
        unknown = accounted - self.generated
        if lost or unknown:
            raise LedgerError(
                f"ledger does not balance: {len(lost)} generated groups neither trained, dropped "
                f"nor pending (e.g. {sorted(lost)[:5]}), {len(unknown)} accounted groups never "
                f"generated (e.g. {sorted(unknown)[:5]})"
            )

    def counts(self) -> dict[str, Any]:
        """Totals for logs and the run summary."""
        return {
            "generated": len(self.generated),
            "trained": len(self.trained),
            "dropped": len(self.dropped),
            "dropped_by_reason": dict(Counter(self.dropped.values())),
            "rerun": len(self.rerun),
            "zero_variance": len(self.zero_variance),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "generated": sorted(self.generated),
            "trained": list(self.trained),
            "dropped": dict(sorted(self.dropped.items())),
            "rerun": dict(sorted(self.rerun.items())),
            "zero_variance": sorted(self.zero_variance),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        return cls(
            generated=set(data["generated"]),
            trained=list(data["trained"]),
            dropped=dict(data["dropped"]),
            rerun=_rerun_reasons(data["rerun"]),
            zero_variance=set(data["zero_variance"]),
        )


def _rerun_reasons(data: list[str] | dict[str, str]) -> dict[str, str]:
    """Older run states kept re-runs as a bare list, all of them re-runs after a resume."""
    return dict(data) if isinstance(data, dict) else dict.fromkeys(data, "resume")


def save_ledger(run_dir: Path, ledger: Ledger, **extra: Any) -> Path:
    """Write the ledger (counts, ids, and `extra` such as the run's status) to `run_dir`.

    Written to a temporary file and renamed, so a kill mid-write keeps the previous one.
    """
    path = Path(run_dir) / LEDGER_FILE
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps({**extra, "counts": ledger.counts(), **ledger.to_dict()}, indent=1))
    os.replace(partial, path)
    return path


def read_ledger(run_dir: Path) -> dict[str, Any]:
    """What `save_ledger` wrote: "counts", the id lists, and the extra fields."""
    return json.loads((Path(run_dir) / LEDGER_FILE).read_text())
