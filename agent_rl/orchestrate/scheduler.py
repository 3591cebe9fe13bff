"""Which group runs where, which groups form the next update, and which are dropped and why.

The scheduler is the pipeline's decisions with nothing else in it: no Ray, no vLLM, no clock.
The pipeline reports events to it (a group was submitted, finished, failed; an actor died or
loaded weights; an update was trained) and asks it questions (may this actor start a group,
what does the loop wait for, what is the next batch). Unit tests drive it with fake actors.

Lag bound. A token sampled by version v and trained in the update from version L has lag
L - v; no trained token may exceed `max_lag` (`trajectory.exceeds_max_lag`, the one predicate).
Three rules enforce it:
- submit a group only while the groups generated-or-running-but-untrained number fewer than
  `groups_per_update * (max_lag + 1)`, only to an actor whose acknowledged weights v are
  within `max_lag` of the learner, and only while the untrained groups at least as old as v
  (the learner takes the oldest first) leave room for it in the updates before v passes
  max_lag: a group that could only be dropped as stale is not started;
- before stepping from L to L + 1, wait for any running group that started at a version v
  that L + 1 would leave beyond max_lag (v is bounded below by the actor's acknowledged version
  at submit time);
- a queued group whose lag would still exceed max_lag is dropped as "stale" and counted.
With max_lag = 0 these rules are synchronous RL: generate a batch, wait for it, train, wait for
every actor to load the new weights, repeat.

Weight sync. The actors take new weights only after every `weight_sync_every`-th update
(`weights_due`), as large clusters do when a broadcast is expensive: between syncs they sample
with the last synced weights, so tokens reach lag K - 1 before any queueing. The rules above
need nothing else: they read the versions the actors acknowledged, whatever the sync rhythm.

The ledger (`agent_rl.orchestrate.ledger`) records every decision: each group id is generated once, then
trained once or dropped with its reason; a task position whose rollout was lost (its actor
died, or the run resumed while it ran) runs again under the same id.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_rl.learn.advantages import has_reward_variance
from agent_rl.orchestrate.hooks import Hook
from agent_rl.orchestrate.ledger import FLAT_FILTERED, Ledger
from agent_rl.orchestrate.run_state import RunState
from agent_rl.trajectory import END_ENV_ERROR, Group, exceeds_max_lag, group_lag

if TYPE_CHECKING:
    from agent_rl.train_config import PipelineConfig

logger = logging.getLogger(__name__)

RESTORING = -(10**9)  # the acknowledged version of an actor being restarted: it gets no work


@dataclass(frozen=True)
class SchedulerLimits:
    """The knobs the scheduling rules read (from `TrainConfig`)."""

    groups_per_update: int
    max_lag: int
    num_updates: int
    groups_in_flight_per_actor: int
    num_actors: int
    dynamic_sampling: bool = False
    weight_sync_every: int = 1

    @classmethod
    def of(cls, pipeline: PipelineConfig, num_actors: int) -> SchedulerLimits:
        """A run's limits; sync mode is lag 0 and syncs every update."""
        return cls(
            groups_per_update=pipeline.groups_per_update,
            max_lag=pipeline.max_lag,
            num_updates=pipeline.num_updates,
            groups_in_flight_per_actor=pipeline.groups_in_flight_per_actor,
            num_actors=num_actors,
            dynamic_sampling=pipeline.dynamic_sampling,
            weight_sync_every=pipeline.weight_sync_every,
        )


@dataclass(frozen=True)
class Work:
    """A group being generated: which task position, on which actor, from which version on."""

    ticket: int  # the scheduler's name for it; the pipeline maps its Ray ref to the ticket
    task_index: int
    actor: int
    min_version: int  # the actor's acknowledged weights at submit time: a lower bound

    @property
    def group_id(self) -> str:
        return group_id_for(self.task_index)


def group_id_for(task_index: int) -> str:
    """Ids follow the task position, so a group re-run after a resume keeps its id."""
    return f"group-{task_index:08d}"


class Scheduler:
    """The queue, the work in flight, the versions and the ledger of one run."""

    def __init__(self, limits: SchedulerLimits, state: RunState, version: int = 0,
                 hooks: Hook | None = None) -> None:
        self.limits = limits
        self.state = state
        self.version = version  # the learner's: updates taken
        self.queue: list[Group] = list(state.queued_groups)
        self.in_flight: dict[int, Work] = {}
        self.reruns: dict[int, str] = dict.fromkeys(sorted(state.in_flight_task_indices),
                                                    "resume")
        self.acked = [0] * limits.num_actors  # weights each actor has loaded (they start at 0)
        self.filtered: list[Group] = []  # flat groups dynamic sampling dropped since the update
        self.hooks = hooks or Hook()
        self.untrained_peak = 0
        self.lag_max = 0
        self._tickets = itertools.count()

    @property
    def ledger(self) -> Ledger:
        return self.state.ledger

    @property
    def untrained(self) -> int:
        return len(self.queue) + len(self.in_flight)

    @property
    def untrained_cap(self) -> int:
        return self.limits.groups_per_update * (self.limits.max_lag + 1)

    # -- questions -----------------------------------------------------------------------------

    def may_submit(self, actor: int) -> bool:
        """Whether `actor` may start one more group now."""
        limits = self.limits
        still_needed = (limits.num_updates - self.version) * limits.groups_per_update
        busy = sum(1 for work in self.in_flight.values() if work.actor == actor)
        return (
            self.untrained < self.untrained_cap
            and self.untrained < still_needed
            and busy < limits.groups_in_flight_per_actor
            and self.acked[actor] != RESTORING
            and not exceeds_max_lag(self.acked[actor], self.version, limits.max_lag)
            and self._room_before_stale(self.acked[actor])
        )

    def _room_before_stale(self, version: int) -> bool:
        """Whether a group sampled from weights `version` on could still be trained: the
        learner takes the oldest groups first, so those at least as old must not already fill
        the updates left before `version` passes max_lag. With every actor on the learner's
        weights this is the untrained cap; it bites when weights lag (a sparse weight sync)."""
        updates_left = version + self.limits.max_lag - self.version + 1
        older = sum(1 for work in self.in_flight.values() if work.min_version <= version)
        older += sum(1 for group in self.queue if group.oldest_version <= version)
        return older < updates_left * self.limits.groups_per_update

    def weights_due(self, version: int) -> bool:
        """Whether the actors take the weights of `version` (the learner's after an update):
        every `weight_sync_every`-th version."""
        return version % self.limits.weight_sync_every == 0

    def at_risk(self) -> list[Work]:
        """Running groups the next update would push beyond max_lag: wait for them first."""
        return [
            work for work in self.in_flight.values()
            if exceeds_max_lag(work.min_version, self.version + 1, self.limits.max_lag)
        ]

    def must_wait_for(self) -> list[Work] | None:
        """The running groups the loop must wait for before the next update, or None when it
        may wait for anything."""
        at_risk = self.at_risk()
        if at_risk and len(self.queue) >= self.limits.groups_per_update:
            return at_risk
        return None

    def take_batch(self) -> list[Group] | None:
        """The oldest usable groups for the next update (stale ones dropped), or None if the
        loop must wait first."""
        if self.must_wait_for() or self.hooks.holds_batch(self):
            return None
        # Ties go by group id (= task position), so a sync run's order does not hang on timing.
        self.queue.sort(key=lambda group: (group.oldest_version, group.group_id))
        while self.queue and self._stale(self.queue[0]):
            stale = self.queue.pop(0)
            self.ledger.record_dropped(stale.group_id, "stale")
            logger.warning("dropped stale group %s (lag %d)", stale.group_id,
                           group_lag(stale, self.version))
        size = self.limits.groups_per_update
        if len(self.queue) < size:
            return None
        batch, self.queue[:size] = self.queue[:size], []
        return batch

    def _stale(self, group: Group) -> bool:
        oldest = group.oldest_version  # -1: no sampled token, nothing to be stale
        return oldest >= 0 and exceeds_max_lag(oldest, self.version, self.limits.max_lag)

    def work_of(self, actor: int) -> list[Work]:
        return [work for work in self.in_flight.values() if work.actor == actor]

    # -- events --------------------------------------------------------------------------------

    def submit(self, actor: int) -> Work:
        """Start the next task position on `actor` (a re-run first); call when `may_submit`."""
        if self.reruns:
            task_index = min(self.reruns)
            self.ledger.record_rerun(group_id_for(task_index), self.reruns.pop(task_index))
        else:
            task_index = self.state.next_task_index
            self.state.next_task_index += 1
        work = Work(next(self._tickets), task_index, actor, self.acked[actor])
        self.in_flight[work.ticket] = work
        self.untrained_peak = max(self.untrained_peak, self.untrained)
        return work

    def finished(self, ticket: int, group: Group) -> str:
        """A group came back; returns where it went: "queued" or the reason it was dropped."""
        work = self.in_flight.pop(ticket)
        self.ledger.record_generated(work.group_id)
        if any(t.end_reason == END_ENV_ERROR for t in group.trajectories):
            # An episode the env or engine broke has no verdict; its reward 0 would be a lie.
            self.ledger.record_dropped(work.group_id, "env_error")
            return "env_error"
        if self.limits.dynamic_sampling and not has_reward_variance(group.rewards):
            # No gradient in it and never shown to the learner: dropped with its reason, charted
            # with the next update, never a step alone.
            self.ledger.record_dropped(work.group_id, FLAT_FILTERED)
            self.filtered.append(group)
            return FLAT_FILTERED
        self.queue.append(group)
        return "queued"

    def failed(self, ticket: int) -> Work:
        """A group's rollout raised: counted as generated and dropped, never retried."""
        work = self.in_flight.pop(ticket)
        self.ledger.record_generated(work.group_id)
        self.ledger.record_dropped(work.group_id, "rollout_error")
        return work

    def actor_lost(self, actor: int) -> list[Work]:
        """`actor` died: its groups run again under their ids; it gets no work until
        `actor_acked` says it holds the current weights. Returns the work it took down."""
        lost = self.work_of(actor)
        for work in lost:
            del self.in_flight[work.ticket]
            self.reruns[work.task_index] = "actor_died"
        self.acked[actor] = RESTORING
        return lost

    def actor_acked(self, actor: int, version: int) -> None:
        """`actor` samples with weights `version` from now on."""
        self.acked[actor] = max(self.acked[actor], version)

    def trained(self, batch: list[Group], lag_max: int) -> list[Group]:
        """The learner took one update on `batch`; returns the flat groups dynamic sampling
        dropped since the last update, to chart with this one."""
        for group in batch:
            self.ledger.record_trained(group.group_id,
                                       zero_variance=not has_reward_variance(group.rewards))
        self.version += 1
        self.lag_max = max(self.lag_max, lag_max)
        filtered, self.filtered = self.filtered, []
        return filtered

    def untrain(self, batch: list[Group]) -> None:
        """An update failed before it counted: its groups are queued again."""
        self.queue[:0] = batch

    def end(self) -> None:
        """The run ends: queued groups are dropped; running ones re-run on resume."""
        for group in self.queue:
            self.ledger.record_dropped(group.group_id, "run_ended")
        self.queue.clear()

    def ledger_extras(self) -> dict[str, object]:
        """Where the run stands, for `ledger.json` beside the ledger itself."""
        return {
            "version": self.version,
            "queued": [group.group_id for group in self.queue],
            "in_flight": sorted(work.group_id for work in self.in_flight.values()),
            "to_rerun": {group_id_for(index): why for index, why in sorted(self.reruns.items())},
        }

    def snapshot(self) -> RunState:
        """The run state a checkpoint keeps (checked: the ledger balances)."""
        self.state.queued_groups = list(self.queue)
        self.state.in_flight_task_indices = sorted(
            [work.task_index for work in self.in_flight.values()] + list(self.reruns)
        )
        self.ledger.check(pending={group.group_id for group in self.queue})
        return self.state
