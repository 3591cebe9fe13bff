"""The scheduling rules without Ray or vLLM: fake actors, a fake clock, milliseconds per test.

The scheduler decides what may run, what is trained and what is dropped; these tests drive it
through the situations a real run meets (back-pressure at max_lag, stale and flat groups, an
actor dying mid-group, a resume) and check the lag bound and the ledger after each. The actor
pool is driven with a fake `ray` module for its broadcast and restart rules.
"""

from __future__ import annotations

import heapq
import random
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_rl.orchestrate.actor_pool import ActorDied, ActorPool, GroupDone, WeightsLoaded
from agent_rl.orchestrate.hooks import Hook, Hooks
from agent_rl.orchestrate.ledger import FLAT_FILTERED
from agent_rl.orchestrate.run_state import RunState
from agent_rl.orchestrate.scheduler import RESTORING, Scheduler, SchedulerLimits, group_id_for
from agent_rl.trajectory import END_ENV_ERROR, END_TERMINATED, Group, Trajectory, group_lag


def limits(**overrides: Any) -> SchedulerLimits:
    values = {"groups_per_update": 1, "max_lag": 2, "num_updates": 100,
              "groups_in_flight_per_actor": 100, "num_actors": 1, "dynamic_sampling": False,
              "weight_sync_every": 1}
    return SchedulerLimits(**{**values, **overrides})


def group(task_index: int, version: int, rewards: tuple[float, ...] = (0.0, 1.0),
          end_reason: str = END_TERMINATED) -> Group:
    """A group sampled entirely by weights `version` (two tokens: prompt, one sampled)."""
    trajectories = [
        Trajectory(task_id=f"task-{task_index}", group_id=group_id_for(task_index),
                   token_ids=[1, 2], loss_mask=[0, 1], behavior_logprobs=[0.0, -1.0],
                   policy_versions=[-1, version], reward=reward, num_turns=1,
                   end_reason=end_reason)
        for reward in rewards
    ]
    return Group(group_id_for(task_index), f"task-{task_index}", trajectories)


def test_submissions_stop_at_the_untrained_cap() -> None:
    scheduler = Scheduler(limits(groups_per_update=2, max_lag=2), RunState())
    while scheduler.may_submit(0):
        scheduler.submit(0)
    assert len(scheduler.in_flight) == 2 * (2 + 1) == scheduler.untrained_cap


def test_submissions_stop_when_the_remaining_updates_are_covered() -> None:
    scheduler = Scheduler(limits(num_updates=3, max_lag=64), RunState())
    while scheduler.may_submit(0):
        scheduler.submit(0)
    assert len(scheduler.in_flight) == 3


def test_an_actor_too_far_behind_or_restoring_gets_no_work() -> None:
    scheduler = Scheduler(limits(max_lag=2, num_actors=2), RunState(), version=5)
    scheduler.actor_acked(0, 3)
    scheduler.actor_acked(1, 2)
    assert scheduler.may_submit(0) and not scheduler.may_submit(1)
    scheduler.actor_lost(0)
    assert scheduler.acked[0] == RESTORING and not scheduler.may_submit(0)
    scheduler.actor_acked(0, 5)
    assert scheduler.may_submit(0)


def test_running_groups_the_next_update_would_make_too_old_are_waited_for() -> None:
    scheduler = Scheduler(limits(max_lag=1, num_actors=2), RunState())
    old = scheduler.submit(0)  # starts at version 0
    scheduler.actor_acked(1, 0)
    queued = scheduler.submit(1)
    scheduler.finished(queued.ticket, group(queued.task_index, 0))
    assert scheduler.take_batch() is not None  # 0 -> 1 keeps `old` within lag 1
    scheduler.trained([], lag_max=0)
    scheduler.actor_acked(1, 1)
    fresh = scheduler.submit(1)
    scheduler.finished(fresh.ticket, group(fresh.task_index, 1))
    assert scheduler.must_wait_for() == [old]  # 1 -> 2 would leave `old` at lag 2
    assert scheduler.take_batch() is None
    scheduler.finished(old.ticket, group(old.task_index, 0))
    batch = scheduler.take_batch()
    assert batch is not None and all(group_lag(g, scheduler.version) <= 1 for g in batch)


def test_a_stale_queued_group_is_dropped_and_counted() -> None:
    scheduler = Scheduler(limits(max_lag=1), RunState(), version=3)
    work = scheduler.submit(0)
    scheduler.finished(work.ticket, group(work.task_index, 1))
    assert scheduler.take_batch() is None
    assert scheduler.ledger.dropped == {work.group_id: "stale"}
    scheduler.ledger.check()


def test_flat_groups_are_filtered_and_charted_with_the_next_update() -> None:
    scheduler = Scheduler(limits(dynamic_sampling=True), RunState())
    flat, useful = scheduler.submit(0), scheduler.submit(0)
    assert scheduler.finished(flat.ticket, group(flat.task_index, 0, (1.0, 1.0))) == FLAT_FILTERED
    assert scheduler.finished(useful.ticket, group(useful.task_index, 0)) == "queued"
    batch = scheduler.take_batch()
    assert [g.group_id for g in batch] == [useful.group_id]
    filtered = scheduler.trained(batch, lag_max=0)
    assert [g.group_id for g in filtered] == [flat.group_id] and not scheduler.filtered
    assert scheduler.ledger.dropped == {flat.group_id: FLAT_FILTERED}
    scheduler.ledger.check()


def test_env_errors_and_failed_rollouts_are_dropped_with_their_reason() -> None:
    scheduler = Scheduler(limits(), RunState())
    broken, failed = scheduler.submit(0), scheduler.submit(0)
    outcome = scheduler.finished(broken.ticket, group(broken.task_index, 0,
                                                      end_reason=END_ENV_ERROR))
    assert outcome == END_ENV_ERROR
    assert scheduler.failed(failed.ticket) == failed
    assert scheduler.ledger.dropped == {broken.group_id: "env_error",
                                        failed.group_id: "rollout_error"}
    scheduler.ledger.check()


def test_a_dead_actors_groups_run_again_under_their_ids() -> None:
    scheduler = Scheduler(limits(num_actors=2), RunState())
    lost = [scheduler.submit(0), scheduler.submit(0)]
    survivor = scheduler.submit(1)
    assert scheduler.actor_lost(0) == lost
    assert list(scheduler.in_flight.values()) == [survivor]
    again = scheduler.submit(1)
    assert again.task_index == lost[0].task_index and again.group_id == lost[0].group_id
    assert scheduler.ledger.rerun == {lost[0].group_id: "actor_died"}
    assert scheduler.snapshot().in_flight_task_indices == sorted(
        [w.task_index for w in (survivor, again, lost[1])])


def test_resume_from_a_snapshot_reruns_what_ran_and_keeps_the_queue() -> None:
    scheduler = Scheduler(limits(), RunState(), version=0)
    done, running = scheduler.submit(0), scheduler.submit(0)
    scheduler.finished(done.ticket, group(done.task_index, 0))
    saved = RunState.from_dict(scheduler.snapshot().to_dict())

    resumed = Scheduler(limits(), saved, version=0)
    assert [g.group_id for g in resumed.queue] == [done.group_id]
    again = resumed.submit(0)
    assert again.group_id == running.group_id
    assert resumed.ledger.rerun == {running.group_id: "resume"}
    assert resumed.submit(0).task_index == 2  # then new positions, where the old run stopped


class HoldOnce(Hook):
    def __init__(self) -> None:
        self.held = False

    def holds_batch(self, scheduler: Any) -> bool:
        self.held, was_held = True, self.held
        return not was_held


def test_a_hook_may_hold_a_ready_batch_back() -> None:
    scheduler = Scheduler(limits(), RunState(), hooks=Hooks([HoldOnce()]))
    work = scheduler.submit(0)
    scheduler.finished(work.ticket, group(work.task_index, 0))
    assert scheduler.take_batch() is None
    assert scheduler.take_batch() is not None


@dataclass(order=True)
class _Finish:
    time: float
    ticket: int = field(compare=True)
    actor: int = field(compare=False)


def simulate(max_lag: int, num_actors: int, seed: int, updates: int = 30,
             groups_per_update: int = 2, weight_sync_every: int = 1
             ) -> tuple[Scheduler, list[int]]:
    """A whole run with fake actors and a fake clock: groups take random times, a random
    share is flat, weights reach each actor a random while after each update the scheduler
    syncs, one actor dies."""
    rng = random.Random(seed)
    scheduler = Scheduler(limits(max_lag=max_lag, num_actors=num_actors, num_updates=updates,
                                 groups_per_update=groups_per_update, dynamic_sampling=True,
                                 groups_in_flight_per_actor=3,
                                 weight_sync_every=weight_sync_every), RunState())
    clock, finishing, loads, lags = 0.0, [], [], []
    killed = False
    while scheduler.version < updates:
        for actor in range(num_actors):
            while scheduler.may_submit(actor):
                work = scheduler.submit(actor)
                heapq.heappush(finishing, _Finish(clock + rng.expovariate(1.0), work.ticket,
                                                  actor))
        batch = scheduler.take_batch()
        if batch is not None:
            lags += [group_lag(g, scheduler.version) for g in batch]
            scheduler.trained(batch, lag_max=max(lags))
            if not scheduler.weights_due(scheduler.version):
                continue
            for actor in range(num_actors):
                heapq.heappush(loads, (clock + rng.uniform(0, 2), actor, scheduler.version))
            if max_lag == 0:  # sync: every actor loads the weights before anything else runs
                for _due, actor, version in sorted(loads):
                    scheduler.actor_acked(actor, version)
                loads.clear()
            continue
        if not killed and scheduler.version == updates // 2 and num_actors > 1:
            killed = True
            scheduler.actor_lost(1)  # restored with the newest weights the actors were sent
            synced = scheduler.version - scheduler.version % weight_sync_every
            heapq.heappush(loads, (clock + 3.0, 1, synced))
        # The next event: a weight load or a finished group (one the scheduler waits for).
        waiting_for = scheduler.must_wait_for()
        tickets = None if waiting_for is None else {w.ticket for w in waiting_for}
        if loads and (tickets is None or not finishing or loads[0][0] < finishing[0].time):
            clock, actor, version = heapq.heappop(loads)
            scheduler.actor_acked(actor, version)
            continue
        event = heapq.heappop(finishing)
        clock = max(clock, event.time)
        work = scheduler.in_flight.get(event.ticket)
        if work is None:
            continue  # its actor died: the group runs again elsewhere
        sampled_at = scheduler.acked[work.actor]
        version = rng.randint(work.min_version, max(work.min_version, sampled_at))
        rewards = (1.0, 1.0) if rng.random() < 0.3 else (0.0, 1.0)
        scheduler.finished(event.ticket, group(work.task_index, version, rewards))
    return scheduler, lags


@pytest.mark.parametrize("max_lag", [0, 1, 4, 64])
@pytest.mark.parametrize("seed", range(5))
def test_a_simulated_run_keeps_the_lag_bound_and_balances_its_ledger(max_lag: int,
                                                                     seed: int) -> None:
    scheduler, lags = simulate(max_lag, num_actors=3, seed=seed)
    assert scheduler.version == 30
    assert lags and max(lags) <= max_lag
    scheduler.end()
    scheduler.ledger.check()
    counts = scheduler.ledger.counts()
    assert counts["trained"] == 30 * 2
    assert set(counts["dropped_by_reason"]) <= {FLAT_FILTERED, "stale", "run_ended"}


def test_weights_go_to_the_actors_after_every_kth_update() -> None:
    scheduler = Scheduler(limits(max_lag=8, weight_sync_every=4), RunState())
    assert [v for v in range(1, 13) if scheduler.weights_due(v)] == [4, 8, 12]
    every_update = Scheduler(limits(), RunState())
    assert all(every_update.weights_due(v) for v in range(1, 6))


def test_a_group_that_could_only_go_stale_is_not_started() -> None:
    """Weights synced every 4 updates, max_lag 3: at version 3 the actor still samples with
    version 0's weights, and one queued group of version 0 already fills the last update that
    may train such tokens; another would be dropped, so it does not start until the sync."""
    scheduler = Scheduler(limits(max_lag=3, weight_sync_every=4), RunState(), version=3)
    work = scheduler.submit(0)
    scheduler.finished(work.ticket, group(work.task_index, 0))
    assert not scheduler.may_submit(0)
    scheduler.actor_acked(0, 4)
    assert scheduler.may_submit(0)


def test_under_a_sparse_sync_a_group_beyond_max_lag_is_waited_for() -> None:
    """Weights every 4 updates, max_lag 4: a long group started on version 0 holds the update
    from version 4 until it lands, and is then trained first, at lag 4, not 5."""
    scheduler = Scheduler(limits(max_lag=4, weight_sync_every=4, num_actors=2), RunState())
    old = scheduler.submit(0)
    for _ in range(4):
        work = scheduler.submit(1)
        scheduler.finished(work.ticket, group(work.task_index, 0))
        batch = scheduler.take_batch()
        assert batch is not None
        scheduler.trained(batch, lag_max=group_lag(batch[0], scheduler.version))
    assert scheduler.version == 4 and scheduler.weights_due(4)
    scheduler.actor_acked(1, 4)
    fresh = scheduler.submit(1)
    scheduler.finished(fresh.ticket, group(fresh.task_index, 4))
    assert scheduler.must_wait_for() == [old] and scheduler.take_batch() is None
    scheduler.finished(old.ticket, group(old.task_index, 0))
    batch = scheduler.take_batch()
    assert [g.group_id for g in batch] == [old.group_id]
    assert group_lag(batch[0], scheduler.version) == 4


def test_under_a_sparse_sync_a_queued_group_beyond_max_lag_is_dropped_as_stale() -> None:
    """A resumed run's queued group sampled 5 updates ago, max_lag 4: dropped and counted."""
    saved = RunState(queued_groups=[group(7, 0)], next_task_index=8)
    saved.ledger.record_generated(group_id_for(7))
    scheduler = Scheduler(limits(max_lag=4, weight_sync_every=4), saved, version=5)
    assert scheduler.take_batch() is None
    assert scheduler.ledger.dropped == {group_id_for(7): "stale"}


@pytest.mark.parametrize("seed", range(5))
def test_a_sparse_weight_sync_trains_tokens_far_behind_within_max_lag(seed: int) -> None:
    scheduler, lags = simulate(max_lag=12, num_actors=3, seed=seed, updates=40,
                               weight_sync_every=10)
    assert scheduler.version == 40
    assert 9 <= max(lags) <= 12  # the sync gap alone is 9 updates; the bound holds
    assert sum(lag > 1 for lag in lags) > len(lags) / 2
    scheduler.end()
    scheduler.ledger.check()
    assert scheduler.ledger.counts()["trained"] == 40 * 2


def test_the_scheduler_needs_neither_ray_nor_vllm() -> None:
    code = ("import sys, agent_rl.orchestrate.scheduler; "
            "print(sorted(m for m in ('ray', 'vllm') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


# -- the actor pool, with a fake ray ----------------------------------------------------------


class FakeRef:
    def __init__(self, value: Any = None, error: BaseException | None = None,
                 ready: bool = True) -> None:
        self.value, self.error, self.ready = value, error, ready


class _Exceptions:
    class RayError(Exception):
        pass

    class RayActorError(RayError):
        pass

    class ActorUnavailableError(RayActorError):
        pass


class FakeRay:
    exceptions = _Exceptions

    def __init__(self) -> None:
        self.killed: list[Any] = []

    def put(self, value: Any) -> FakeRef:
        return FakeRef(value)

    def wait(self, refs: list[FakeRef], num_returns: int = 1,
             timeout: float | None = None) -> tuple[list[FakeRef], list[FakeRef]]:
        ready = [ref for ref in refs if ref.ready]
        return ready, [ref for ref in refs if not ref.ready]

    def get(self, ref: FakeRef | list[FakeRef], timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, handle: Any, no_restart: bool = True) -> None:
        self.killed.append(handle)


@dataclass
class _Timing:
    total_s: float = 0.1


class FakeMethod:
    def __init__(self, actor: FakeActor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any) -> FakeRef:
        self.actor.calls.append((self.name, args))
        ref = FakeRef(_Timing() if self.name == "update_weights" else None,
                      ready=self.actor.answers)
        self.actor.refs.append(ref)
        return ref


class FakeActor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.refs: list[FakeRef] = []
        self.answers = True

    def __getattr__(self, name: str) -> FakeMethod:
        return FakeMethod(self, name)

    def versions_sent(self) -> list[int]:
        return [args[0] for name, args in self.calls if name == "update_weights"]


class DelayEach(Hook):
    def __init__(self) -> None:
        self.settled = 0

    def broadcast_delay_s(self) -> float:
        return 0.05

    def delayed_broadcast_settled(self) -> None:
        self.settled += 1


def test_a_delayed_broadcast_is_overtaken_by_a_newer_one() -> None:
    actors = [FakeActor(), FakeActor()]
    hook = DelayEach()
    pool = ActorPool(FakeRay(), actors, max_restarts=1, hooks=Hooks([hook]),
                     stall_timeout_s=1.0)
    pool.broadcast(1, {"w": 1})
    assert all(actor.versions_sent() == [] for actor in actors)
    pool.broadcast(2, {"w": 2})  # v1 never goes out: v2 replaces it, and waits too
    assert hook.settled == 1 and pool.delayed.version == 2
    events = pool.wait_for_weights(2)  # waits out the delay, then sends
    assert all(actor.versions_sent() == [2] for actor in actors)
    assert sorted((e.actor, e.version) for e in events) == [(0, 2), (1, 2)]
    assert hook.settled == 2


def test_a_stale_broadcast_an_actor_refuses_is_skipped_not_fatal() -> None:
    """Reordered broadcasts (a soak fault): v1 reaches an actor after v2, which refuses it as not
    newer; the pool reports no load for it and the run goes on on v2."""
    from agent_rl.rollout.weight_sync import WeightVersionError

    actors = [FakeActor()]
    pool = ActorPool(FakeRay(), actors, max_restarts=0, hooks=Hooks(), stall_timeout_s=1.0)
    pool.broadcast(1, {"w": 1})
    actors[0].refs[-1].error = WeightVersionError("weight version 1 is not newer than 2")
    assert pool.wait_for_weights(1) == []


def test_a_dead_actor_is_restored_at_the_current_version_and_its_groups_reported() -> None:
    actors = [FakeActor(), FakeActor()]
    ray = FakeRay()
    pool = ActorPool(ray, actors, max_restarts=1, hooks=Hooks(), stall_timeout_s=1.0)
    scheduler = Scheduler(limits(num_actors=2), RunState())
    pool.broadcast(1, {"w": 1})
    pool.wait_for_weights(1)
    assert pool.weights_version == 1  # what the pipeline restores a dead actor with
    work = scheduler.submit(0)
    pool.submit(work, {"task_id": "t"}, 2)
    actors[0].refs[-1].error = ray.exceptions.RayActorError("killed")
    events = pool.wait()
    assert [type(e) for e in events] == [ActorDied]
    scheduler.actor_lost(0)
    pool.restore(0, 3, events[0].error)
    assert actors[0].calls[-1][0] == "update_weights" and actors[0].calls[-1][1][0] == 3
    events = pool.wait()
    assert [(type(e), e.actor, e.version) for e in events] == [(WeightsLoaded, 0, 3)]
    scheduler.actor_acked(0, 3)
    assert scheduler.may_submit(0)
    with pytest.raises(Exception, match="died 2 times"):
        pool.restore(0, 3, RuntimeError("again"))


def test_a_finished_group_comes_back_with_its_ticket() -> None:
    actors = [FakeActor()]
    pool = ActorPool(FakeRay(), actors, max_restarts=0, hooks=Hooks(), stall_timeout_s=1.0)
    scheduler = Scheduler(limits(), RunState())
    work = scheduler.submit(0)
    pool.submit(work, {"task_id": "t"}, 2)
    name, args = actors[0].calls[-1]
    assert name == "generate_group" and args[3] == work.group_id
    actors[0].refs[-1].value = group(work.task_index, 0)
    (event,) = pool.wait({work.ticket})
    assert isinstance(event, GroupDone) and event.ticket == work.ticket


def test_a_death_seen_through_several_calls_is_one_death() -> None:
    actors = [FakeActor()]
    ray = FakeRay()
    pool = ActorPool(ray, actors, max_restarts=1, hooks=Hooks(), stall_timeout_s=1.0)
    scheduler = Scheduler(limits(), RunState())
    for _ in range(2):
        pool.submit(scheduler.submit(0), {"task_id": "t"}, 2)
    pool.broadcast(1, {"w": 1})
    for ref in actors[0].refs:
        ref.error = ray.exceptions.RayActorError("killed")
    assert [type(e) for e in pool.wait()] == [ActorDied]
    assert not pool.groups and not pool.loads
