"""The driver's injected faults (`agent_rl.orchestrate.faults`) as one hook on the run.

Each fault is armed after the update the config names (or at random) and fires at its hook
point: the learner "dies" right after the update, an actor is killed mid-episode when the loop
next waits, a broadcast is held back, or the learner waits until the queue is full. Counts of
what was injected and what the run recovered from go to the run's fault report.
"""

from __future__ import annotations

import logging
from typing import Any

from agent_rl.orchestrate.faults import (
    DELAY_BROADCAST,
    FILL_QUEUE,
    KILL_ACTOR,
    KILL_LEARNER,
    FaultInjector,
    LearnerKilled,
)
from agent_rl.orchestrate.hooks import Hook

logger = logging.getLogger(__name__)


class DriverFaults(Hook):
    """Fires the faults `injector` says are due; counts them in `injector`."""

    def __init__(self, injector: FaultInjector, run_dir: Any) -> None:
        self.injector = injector
        self.run_dir = run_dir
        self.kill_actor_armed = False
        self.hold_until_full = False
        self.killed: set[int] = set()

    def after_update(self, version: int) -> None:
        due = self.injector.after_update(version)
        for kind in sorted(due - {DELAY_BROADCAST}):  # a delay is counted when a broadcast waits
            self.injector.injected[kind] += 1
        self.hold_until_full |= FILL_QUEUE in due
        self.kill_actor_armed |= KILL_ACTOR in due
        if KILL_LEARNER in due:
            raise LearnerKilled(
                f"fault injected: the learner died after update {version}; run again on "
                f"{self.run_dir} to resume from its last checkpoint"
            )

    def tick(self, scheduler: Any, pool: Any) -> None:
        """Kill the actor with the most groups in flight, mid-episode; Ray restarts it."""
        if not self.kill_actor_armed or not scheduler.in_flight:
            return
        self.kill_actor_armed = False
        busy = [work.actor for work in scheduler.in_flight.values()]
        actor = max(set(busy), key=busy.count)
        logger.warning("fault injected: killing rollout actor %d with %d groups in flight",
                       actor, busy.count(actor))
        self.killed.add(actor)
        pool.kill(actor)

    def holds_batch(self, scheduler: Any) -> bool:
        """The fill-queue fault: no update until the submit rules admit no more work."""
        if not self.hold_until_full:
            return False
        actors = range(scheduler.limits.num_actors)
        if scheduler.in_flight or any(scheduler.may_submit(actor) for actor in actors):
            return True
        self.hold_until_full = False
        self.injector.recovered[FILL_QUEUE] += 1
        logger.info("queue filled to %d untrained groups; training resumes", len(scheduler.queue))
        return False

    def broadcast_delay_s(self) -> float:
        delay = self.injector.broadcast_delay_s()
        if delay > 0:
            self.injector.injected[DELAY_BROADCAST] += 1
        return delay

    def delayed_broadcast_settled(self) -> None:
        self.injector.recovered[DELAY_BROADCAST] += 1

    def actor_restored(self, actor: int) -> None:
        if actor in self.killed:
            self.killed.discard(actor)
            self.injector.recovered[KILL_ACTOR] += 1

    def episode_finished(self, info: dict[str, Any]) -> None:
        self.injector.count_episode(info)

