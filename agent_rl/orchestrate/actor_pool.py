"""The rollout actors on Ray: their work, their weights, their deaths and restarts.

The pool turns Ray's object refs into events the scheduler understands (`GroupDone`,
`GroupFailed`, `ActorDied`, `WeightsLoaded`), so nothing else in the run touches a ref. Weights
go out as one `ray.put` per broadcast (after every update, or every `weight_sync_every`-th);
every actor gets the same ref and loads it in flight (generation pauses at an engine step,
keeps its requests, resumes). A broadcast may be held back (a hook says how long); a newer one
supersedes it. An actor that dies is restarted by Ray (`max_actor_restarts`) and gets the
newest published weights and their version before it samples again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from agent_rl.errors import UserError
from agent_rl.orchestrate.hooks import Hooks
from agent_rl.orchestrate.scheduler import Work
from agent_rl.trajectory import Group

logger = logging.getLogger(__name__)

POLL_S = 1.0


class PipelineError(UserError, RuntimeError):
    """The run cannot go on: rollouts keep failing, or nothing arrives for too long."""


@dataclass
class GroupDone:
    ticket: int
    group: Group


@dataclass
class GroupFailed:
    ticket: int
    error: BaseException


@dataclass
class ActorDied:
    actor: int
    error: BaseException


@dataclass
class WeightsLoaded:
    actor: int
    version: int
    load_s: float | None  # None: a restored actor (its load is not a broadcast's)


Event = GroupDone | GroupFailed | ActorDied | WeightsLoaded


@dataclass
class _Delayed:
    due: float
    version: int
    weights_ref: Any


class ActorPool:
    """Owns the Ray rollout actors; `wait` turns their finished calls into events."""

    def __init__(self, ray: Any, actors: list[Any], max_restarts: int, hooks: Hooks,
                 stall_timeout_s: float) -> None:
        self.ray = ray
        self.actors = actors
        self.max_restarts = max_restarts
        self.hooks = hooks
        self.stall_timeout_s = stall_timeout_s
        self.groups: dict[Any, tuple[int, int]] = {}  # ref -> (actor, ticket)
        self.loads: dict[Any, tuple[int, int]] = {}  # ref -> (actor, version): a broadcast
        self.restores: dict[Any, tuple[int, int]] = {}  # ref -> (actor, version): a restart
        self.sent = [0] * len(actors)  # the newest weight version sent to each actor
        self.restarts = [0] * len(actors)
        self.dead: set[int] = set()  # reported dead, not yet restored
        self.weights_ref: Any = None
        self.weights_version = 0  # the version of `weights_ref`: the newest weights published
        self.delayed: _Delayed | None = None

    # -- work ----------------------------------------------------------------------------------

    def start(self, on_status: Any, logs: Any, every_s: float = 20.0) -> None:
        """Build every actor's engine, saying now and then what is still awaited; an actor
        that fails to start raises here, at once."""
        starting = [actor.start.remote() for actor in self.actors]
        began = time.monotonic()
        pending = list(starting)
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=len(pending), timeout=every_s)
            self.ray.get(ready)
            if pending:
                on_status(f"waiting for {len(pending)} of {len(starting)} rollout engine(s) to "
                          f"start, {time.monotonic() - began:.0f} s so far; their logs: {logs}")

    def run_episodes(self, tasks: list[dict[str, Any]]) -> list[Group]:
        """One episode of each task, spread over the actors (the periodic evaluation)."""
        refs = [
            self.actors[i % len(self.actors)].generate_group.remote(task, 1, group_seed=i)
            for i, task in enumerate(tasks)
        ]
        return self.ray.get(refs)

    def submit(self, work: Work, task: dict[str, Any], group_size: int) -> None:
        ref = self.actors[work.actor].generate_group.remote(
            task, group_size, work.task_index, work.group_id
        )
        self.groups[ref] = (work.actor, work.ticket)

    def kill(self, actor: int) -> None:
        """Kill `actor` mid-episode (Ray restarts it); its death arrives as an event."""
        self.ray.kill(self.actors[actor], no_restart=False)

    # -- weights -------------------------------------------------------------------------------

    def broadcast(self, version: int, state_dict: dict[str, Any]) -> None:
        """Publish `version` once and send it to every actor, unless a hook holds it back."""
        self.weights_ref = self.ray.put(dict(state_dict))  # once; every actor gets this copy
        self.weights_version = version
        if self.delayed is not None:  # superseded: the newer weights go instead
            self.delayed = None
            self.hooks.delayed_broadcast_settled()
        delay = self.hooks.broadcast_delay_s()
        if delay > 0:
            self.delayed = _Delayed(time.monotonic() + delay, version, self.weights_ref)
            return
        self._send(version, self.weights_ref)

    def send_due_broadcast(self, wait: bool = False) -> None:
        """Send a held-back broadcast once it is due (or now, waiting for it, with `wait`)."""
        if self.delayed is None:
            return
        if wait:
            time.sleep(max(0.0, self.delayed.due - time.monotonic()))
        elif time.monotonic() < self.delayed.due:
            return
        delayed, self.delayed = self.delayed, None
        self._send(delayed.version, delayed.weights_ref)
        self.hooks.delayed_broadcast_settled()

    def _send(self, version: int, weights_ref: Any) -> None:
        restoring = {actor for actor, _ in self.restores.values()}
        for index, actor in enumerate(self.actors):
            if index in restoring or self.sent[index] >= version:
                continue  # a restore carries the newest weights; never send an actor older ones
            self.loads[actor.update_weights.remote(version, weights_ref)] = (index, version)
            self.sent[index] = version

    def restore(self, actor: int, version: int, error: BaseException) -> None:
        """Load the current weights and version into a restarted actor before it samples again.

        Calls made to a restarting Ray actor wait until its constructor has run again.
        """
        self.dead.discard(actor)
        self.restarts[actor] += 1
        if self.restarts[actor] > self.max_restarts:
            raise PipelineError(
                f"rollout actor {actor} died {self.restarts[actor]} times (max_actor_restarts = "
                f"{self.max_restarts}); the last: {error}"
            ) from error
        self._send_restore(actor, version)

    def _send_restore(self, actor: int, version: int) -> None:
        handle = self.actors[actor]
        if self.weights_ref is None:  # still the initial weights the actor starts from
            ref = handle.start.remote()
        else:
            ref = handle.update_weights.remote(version, self.weights_ref)
        self.restores[ref] = (actor, version)
        self.sent[actor] = version

    # -- waiting -------------------------------------------------------------------------------

    def wait(self, tickets: set[int] | None = None) -> list[Event]:
        """Block until something finishes (one of `tickets`' groups, when given) and return
        every event ready by then."""
        refs = self._refs(tickets)
        if not refs and self.delayed is not None:
            time.sleep(max(0.0, self.delayed.due - time.monotonic()))
            return []
        if not refs:
            raise PipelineError("nothing to wait for: the scheduler admits no work and no "
                                "weights are loading (a bug in the pipeline)")
        waited = time.perf_counter()
        ready: list[Any] = []
        while not ready:
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=POLL_S)
            if self.delayed is not None and time.monotonic() >= self.delayed.due:
                return []
            if time.perf_counter() - waited > self.stall_timeout_s:
                raise PipelineError(
                    f"no rollout finished for {self.stall_timeout_s:.0f}s with "
                    f"{len(self.groups)} groups in flight; raise stall_timeout_s or check the "
                    "rollout actors' logs"
                )
        # Take everything already finished, not just the first, to keep the queue fresh.
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        events: list[Event] = []
        for ref in ready:
            events += self._settle(ref)
        return events

    def wait_for_weights(self, version: int) -> list[Event]:
        """Until every actor has loaded the newest weights; a hung load stops the run after
        stall_timeout_s instead of holding it forever."""
        self.send_due_broadcast(wait=True)
        events: list[Event] = []
        while self.loads or self.restores:
            ref = next(iter(self.loads or self.restores))
            ready, _ = self.ray.wait([ref], timeout=self.stall_timeout_s)
            if not ready:
                raise PipelineError(
                    f"a rollout actor has not loaded weights v{version} within "
                    f"{self.stall_timeout_s:.0f}s; raise stall_timeout_s or check the rollout "
                    "actors' logs"
                )
            events += self._settle(ref)
        return events

    def _refs(self, tickets: set[int] | None) -> list[Any]:
        if tickets is not None:
            return [ref for ref, (_, ticket) in self.groups.items() if ticket in tickets]
        return list(self.groups) + list(self.loads) + list(self.restores)

    def _settle(self, ref: Any) -> list[Event]:
        if ref in self.loads:
            return self._settle_load(ref)
        if ref in self.restores:
            return self._settle_restore(ref)
        if ref in self.groups:  # not settled already by its actor's death
            return self._settle_group(ref)
        return []

    def _settle_group(self, ref: Any) -> list[Event]:
        actor, ticket = self.groups.pop(ref)
        try:
            return [GroupDone(ticket, self.ray.get(ref))]
        except self.ray.exceptions.RayActorError as error:
            return self._died(actor, error)
        except self.ray.exceptions.RayError as error:
            return [GroupFailed(ticket, error)]

    def _settle_load(self, ref: Any) -> list[Event]:
        from agent_rl.rollout.weight_sync import WeightVersionError

        actor, version = self.loads.pop(ref)
        try:
            timing = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as error:
            return self._died(actor, error)
        except WeightVersionError:
            # A delayed broadcast that a newer one overtook: the actor already runs newer weights.
            logger.info("rollout actor %d skipped stale weights v%d", actor, version)
            return []
        except self.ray.exceptions.RayError as error:
            raise PipelineError(
                f"rollout actor {actor} failed to load weights v{version}; its engine is gone, "
                f"see the actor's log: {error}"
            ) from error
        return [WeightsLoaded(actor, version, timing.total_s)]

    def _settle_restore(self, ref: Any) -> list[Event]:
        from agent_rl.rollout.weight_sync import WeightVersionError

        actor, version = self.restores.pop(ref)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.ActorUnavailableError:
            # Still restarting (its engine takes a while): ask again shortly.
            time.sleep(POLL_S)
            self._send_restore(actor, version)
            return []
        except self.ray.exceptions.RayActorError as error:
            return self._died(actor, error)  # a new death, not the one being restored from
        except WeightVersionError:
            pass  # a broadcast reached the new incarnation first: it is already this new
        logger.info("rollout actor %d restored at version %d", actor, version)
        self.hooks.actor_restored(actor)
        return [WeightsLoaded(actor, version, None)]

    def _died(self, actor: int, error: BaseException) -> list[Event]:
        """Forget everything the dead actor held; the pipeline restores it."""
        if actor in self.dead or any(owner == actor for owner, _ in self.restores.values()):
            return []  # the same death, seen again through another of its calls
        self.dead.add(actor)
        for calls in (self.groups, self.loads):
            for ref, (owner, _) in list(calls.items()):
                if owner == actor:
                    del calls[ref]
        logger.warning("rollout actor %d died (%s); restarting it", actor, error)
        return [ActorDied(actor, error)]

    def time_use(self, timeout_s: float = 10.0) -> dict[str, float]:
        """Seconds the live actors spent decoding, waiting on envs and idle, summed; an actor
        that is dead or does not answer in time is left out (a restarted one counts from its
        restart)."""
        totals = {"decoding_s": 0.0, "env_wait_s": 0.0, "idle_s": 0.0}
        for index, actor in enumerate(self.actors):
            if index in self.dead:
                continue
            try:
                use = self.ray.get(actor.time_use.remote(), timeout=timeout_s)
            except Exception as error:  # noqa: BLE001 - a diagnostic must not stop the run
                logger.debug("no time use from rollout actor %d: %s", index, error)
                continue
            for key in totals:
                totals[key] += use.get(key, 0.0)
        return totals

    # -- the end -------------------------------------------------------------------------------

    def shutdown(self, grace_s: float = 30) -> None:
        for actor in self.actors:
            try:
                self.ray.get(actor.shutdown.remote(), timeout=grace_s)
            except BaseException as error:  # noqa: BLE001 - best effort on the way out
                logger.warning("rollout actor did not shut down cleanly: %s", error)
            self.ray.kill(actor)
