"""A discrete-event model of the training pipeline: updates per hour and lag, before renting.

The decisions are the real ones: the loop below is `Pipeline.run` with Ray and vLLM replaced by
a clock, and every question (may this device start a group, what must the next update wait for,
which groups form it, which are stale) goes to the orchestration's own `Scheduler`. Only the
costs are modelled (`Costs`): each rollout device decodes its running episodes at a shared
rate, an episode waits on its env after each turn while the device serves the others, the driver
is blocked while the learner trains, and each broadcast (every update, or every
`weight_sync_every`-th as the scheduler says) pauses every rollout device to load the weights.
Synchronous RL is the same loop with `max_lag = 0`, as in the pipeline.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass, field

from agent_rl.orchestrate.run_state import RunState
from agent_rl.orchestrate.scheduler import Scheduler, SchedulerLimits, Work
from agent_rl.simulate.costs import Costs
from agent_rl.trajectory import Group, Trajectory, group_lag


@dataclass
class SimResult:
    """What a simulated run would measure."""

    mode: str
    updates: int
    hours: float
    updates_per_hour: float
    lag_counts: dict[int, int]  # lag of each trained group's oldest token -> groups
    time_shares: dict[str, float]  # rollout device time: decoding, env_wait, loading, idle
    learner_busy_share: float
    ledger: dict[str, object]
    # lowest and highest updates/hour over the seeds predicted (`predict`): how much a run this
    # short moves with its random draws (env latencies, turn lengths, flat groups)
    spread: tuple[float, float] | None = None

    @property
    def lag_max(self) -> int:
        return max(self.lag_counts, default=0)


@dataclass
class _Episode:
    ticket: int
    turns_left: int


@dataclass
class _Device:
    """One rollout device: episodes decoding, episodes waiting on their env, loaded weights.

    Decoding is processor sharing: every decoding episode gets the same tokens/s, so
    `served` (tokens each decoding episode got since the device started) is one number, and an
    episode's turn ends when `served` reaches the mark it was given when the turn began. The
    heap keeps those marks, so an event costs a log, not a pass over the episodes.
    """

    decoding: list[tuple[float, int, _Episode]] = field(default_factory=list)  # (mark, n, ep)
    waiting: list[tuple[float, int, _Episode]] = field(default_factory=list)  # (ready, n, ep)
    served: float = 0.0
    loaded_version: int = 0
    paused_until: float = 0.0
    time: Counter = field(default_factory=Counter)


@dataclass
class _Running:
    work: Work
    episodes_left: int
    version: int


class Simulation:
    """The pipeline's loop against a clock; `run()` returns what it would have measured."""

    def __init__(self, limits: SchedulerLimits, costs: Costs, group_size: int,
                 learner_devices: int = 1, seed: int = 0,
                 max_tokens_per_turn: float = math.inf) -> None:
        self.limits, self.costs, self.group_size = limits, costs, group_size
        self.max_tokens_per_turn = max_tokens_per_turn
        self.learner_devices = learner_devices
        self.scheduler = Scheduler(limits, RunState(), 0)
        self.devices = [_Device() for _ in range(limits.num_actors)]
        self.running: dict[int, _Running] = {}
        self.done: list[tuple[float, int]] = []  # (time, ticket) of finished groups, undelivered
        self.acks: list[tuple[float, int, int]] = []  # (time, device, version), undelivered
        self.clock = 0.0
        self.learner_s = 0.0
        self.lags: Counter = Counter()
        self.rng = random.Random(seed)
        self._order = 0

    def run(self) -> SimResult:
        scheduler, limits = self.scheduler, self.limits
        while scheduler.version < limits.num_updates:
            for device in range(len(self.devices)):
                while scheduler.may_submit(device):
                    self._start(scheduler.submit(device))
            batch = scheduler.take_batch()
            if batch is not None:
                self._update(batch)
                continue
            wait_for = scheduler.must_wait_for()
            self._wait({work.ticket for work in wait_for} if wait_for else None)
        scheduler.end()
        total = sum(sum(d.time.values()) for d in self.devices) or 1.0
        shares = Counter()
        for device in self.devices:
            shares.update(device.time)
        return SimResult(
            mode="sync" if limits.max_lag == 0 else "async",
            updates=scheduler.version,
            hours=self.clock / 3600,
            updates_per_hour=3600 * scheduler.version / self.clock if self.clock else 0.0,
            lag_counts=dict(sorted(self.lags.items())),
            time_shares={k: shares[k] / total for k in ("decoding", "env_wait", "loading",
                                                        "idle")},
            learner_busy_share=self.learner_s / self.clock if self.clock else 0.0,
            ledger=scheduler.ledger.counts(),
        )

    # -- the driver ----------------------------------------------------------------------------

    def _start(self, work: Work) -> None:
        device = self.devices[work.actor]
        costs = self.costs
        turns = max(1, round(costs.turns_per_episode))
        for _ in range(self.group_size):
            self._decode(device, _Episode(work.ticket, turns))
        self.running[work.ticket] = _Running(work, self.group_size, device.loaded_version)

    def _update(self, batch: list[Group]) -> None:
        """The learner steps (the driver is blocked, rollout goes on), then broadcasts."""
        costs = self.costs
        tokens = sum(len(group.trajectories) for group in batch) * costs.episode_tokens
        step_s = tokens / (costs.learner_tokens_per_s * self.learner_devices)
        busy_s = step_s + costs.update_overhead_s
        self._advance(self.clock + busy_s, learner_busy=True)
        self.learner_s += busy_s
        for group in batch:
            self.lags[group_lag(group, self.scheduler.version)] += 1
        self.scheduler.trained(batch, max(group_lag(g, self.scheduler.version) for g in batch))
        version = self.scheduler.version
        if not self.scheduler.weights_due(version):
            return  # a sparse weight sync: the devices keep sampling with older weights
        for index, device in enumerate(self.devices):
            start = max(self.clock, device.paused_until)
            device.paused_until = start + costs.weight_load_s
            device.loaded_version = version
            self.acks.append((device.paused_until, index, version))
        if self.limits.max_lag == 0:  # sync: the pipeline waits until every actor has loaded
            self._advance(max(t for t, _, _ in self.acks), learner_busy=False)
            self._deliver()

    def _wait(self, tickets: set[int] | None) -> None:
        """`pool.wait`: block until an awaited group finishes (any event when None)."""
        while True:
            ready = [t for t, ticket in self.done if tickets is None or ticket in tickets]
            ready += [t for t, _, _ in self.acks] if tickets is None else []
            if any(t <= self.clock for t in ready):
                self._deliver()
                return
            next_time = self._next_event_time(learner_busy=False)
            if next_time == math.inf and not ready:
                raise RuntimeError(f"the simulated pipeline stalled at version "
                                   f"{self.scheduler.version}: a scheduling rule never lets "
                                   "work finish")
            self._advance(min([next_time, *ready]), learner_busy=False)

    def _deliver(self) -> None:
        """Hand the scheduler every event that happened by now, as `_handle` does."""
        for when, device, version in [a for a in self.acks if a[0] <= self.clock]:
            self.scheduler.actor_acked(device, version)
            self.acks.remove((when, device, version))
        for when, ticket in [d for d in self.done if d[0] <= self.clock]:
            self.done.remove((when, ticket))
            running = self.running.pop(ticket)
            self.scheduler.finished(ticket, self._group(running))

    def _group(self, running: _Running) -> Group:
        work = running.work
        flat = self.rng.random() < self.costs.flat_group_share
        rewards = [0.0] * self.group_size if flat else [float(i % 2) for i in
                                                        range(self.group_size)]
        return Group(work.group_id, f"task-{work.task_index}", [
            Trajectory(task_id=f"task-{work.task_index}", group_id=work.group_id,
                       token_ids=[0], loss_mask=[1], behavior_logprobs=[0.0],
                       policy_versions=[running.version], reward=reward, num_turns=1,
                       end_reason="terminated")
            for reward in rewards
        ])

    # -- the rollout devices -------------------------------------------------------------------

    def _rate(self, device: _Device, learner_busy: bool) -> float:
        """Decode tokens/s of each of `device`'s decoding episodes."""
        n = len(device.decoding)
        if n == 0 or device.paused_until > self.clock:
            return 0.0
        costs = self.costs
        rate = costs.rollout_tokens_per_s * min(n, costs.rollout_saturation) / costs.rollout_saturation
        if learner_busy and costs.shared_cores:
            rate *= costs.rollout_share_while_training
        return rate / n

    def _next_event_time(self, learner_busy: bool) -> float:
        soonest = math.inf
        for device in self.devices:
            if device.waiting:
                soonest = min(soonest, device.waiting[0][0])
            if device.paused_until > self.clock:
                soonest = min(soonest, device.paused_until)
            elif rate := self._rate(device, learner_busy):
                soonest = min(soonest, self.clock + (device.decoding[0][0] - device.served) / rate)
        return soonest

    def _advance(self, until: float, learner_busy: bool) -> None:
        """Run the rollout devices from now to `until`."""
        while self.clock < until:
            step_end = min(until, self._next_event_time(learner_busy))
            dt = step_end - self.clock
            for device in self.devices:
                rate = self._rate(device, learner_busy)
                state = ("loading" if device.paused_until > self.clock else
                         "decoding" if device.decoding else
                         "env_wait" if device.waiting else "idle")
                device.time[state] += dt
                device.served += rate * dt
            self.clock = step_end
            for device in self.devices:
                self._settle(device)

    def _settle(self, device: _Device) -> None:
        """Episodes whose turn ended wait on their env or end; envs that answered decode."""
        finished = []
        while device.decoding and device.decoding[0][0] <= device.served + 1e-9:
            finished.append(heapq.heappop(device.decoding)[2])
        for episode in finished:  # every turn is answered by an env step, the last one too
            episode.turns_left -= 1
            self._order += 1
            heapq.heappush(device.waiting, (self.clock + self._latency(), self._order, episode))
        while device.waiting and device.waiting[0][0] <= self.clock:
            _, _, episode = heapq.heappop(device.waiting)
            if episode.turns_left > 0:
                self._decode(device, episode)
                continue
            running = self.running[episode.ticket]
            running.episodes_left -= 1
            if running.episodes_left == 0:
                self.done.append((self.clock, episode.ticket))

    def _decode(self, device: _Device, episode: _Episode) -> None:
        """`episode` starts a turn on `device`."""
        self._order += 1
        heapq.heappush(device.decoding, (device.served + self._turn_tokens(), self._order, episode))

    def _latency(self) -> float:
        return self._draw(self.costs.env_step_s, self.costs.env_step_sigma)

    def _turn_tokens(self) -> float:
        drawn = self._draw(self.costs.sampled_tokens_per_turn, self.costs.sampled_tokens_sigma)
        return min(max(1.0, drawn), self.max_tokens_per_turn)

    def _draw(self, mean: float, sigma: float) -> float:
        """Lognormal with this mean (fixed when sigma is 0)."""
        if mean <= 0 or sigma <= 0:
            return max(mean, 0.0)
        return self.rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


def simulate(limits: SchedulerLimits, costs: Costs, group_size: int, learner_devices: int = 1,
             seed: int = 0, max_tokens_per_turn: float = math.inf) -> SimResult:
    """Simulate one run of `limits.num_updates` updates; turns are cut at
    `max_tokens_per_turn` as the rollout cuts them."""
    return Simulation(limits, costs, group_size, learner_devices, seed,
                      max_tokens_per_turn).run()
