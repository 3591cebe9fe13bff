"""The training run: N vLLM rollout actors on Ray and one learner, working at the same time.

`train(config)` is the entry point `agent-rl train CONFIG` calls. The driver process holds the
learner and a queue; the rollout actors are Ray actors that generate groups concurrently. The loop:

1. submit tasks to actors while back-pressure allows (see `_may_submit`);
2. collect finished groups into the queue (and weight-update acknowledgements);
3. once `groups_per_update` usable groups are queued, take them oldest first, train one update,
   bump the policy version, `ray.put` the new weights once and hand the same ref to every actor,
   which loads it in flight (generation pauses at an engine step, keeps its requests, resumes).

Lag bound. A token sampled by version v and trained in the update from version L has lag L - v;
no trained token may exceed `max_lag`. Three rules enforce it:
- submit a group only while the number of generated-or-running-but-untrained groups is below
  `groups_per_update * (max_lag + 1)`, and only to an actor whose acknowledged weights are at most
  `max_lag` versions behind the learner (the actor checks the same rule again when the group
  starts, see `agent_rl.rollout`);
- before stepping from L to L + 1, wait for any running group that started at a version v with
  L + 1 - v > max_lag (v is bounded below by the actor's acknowledged version at submit time);
- a queued group whose lag would still exceed max_lag is dropped as "stale" and counted.
With max_lag = 0 these rules are synchronous RL: generate a batch, wait for it, train, wait for
every actor to load the new weights, repeat. That is `mode: sync`, the same code.

Faults. A rollout actor that dies is restarted by Ray (`max_actor_restarts`); the pipeline
re-runs the groups it had in flight under their old ids (ledger: re-run, "actor_died") and
loads the current weights and version into it before it gets new work. An episode whose env
raised is dropped with its group ("env_error"), never half-recorded. Whatever ends the run
(the end, an error, Ctrl-C), `ledger.json` in the run dir says what happened to every group;
`agent_rl.faults` injects such faults on purpose.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_rl.advantages import has_reward_variance
from agent_rl.checkpoint import RunState, latest_checkpoint, load_checkpoint, save_checkpoint
from agent_rl.config import dump_config
from agent_rl.faults import (
    DELAY_BROADCAST,
    FILL_QUEUE,
    KILL_ACTOR,
    KILL_LEARNER,
    FaultInjector,
    FaultyEnvFactory,
    InjectedEnvFault,
    LearnerKilled,
)
from agent_rl.learner import Learner, LearnerSettings, group_metrics
from agent_rl.ledger import FLAT_FILTERED, save_ledger
from agent_rl.loss import LossSettings
from agent_rl.metrics import MetricsWriter
from agent_rl.rollout import END_ENV_ERROR, group_lag
from agent_rl.train_config import TrainConfig
from agent_rl.trajectory import Group

logger = logging.getLogger(__name__)

OnUpdate = Callable[[dict[str, Any]], None]
OnStatus = Callable[[str], None]
STATUS_EVERY_S = 20.0  # how often a slow start-up says what it is still waiting for
POLL_S = 1.0
RESTORING = -(10**9)  # the acknowledged version of an actor being restarted: it gets no work
RAY_CONNECT_TIMEOUT_S = 5.0


class PipelineError(RuntimeError):
    """The run cannot go on: rollouts keep failing, or nothing arrives for too long."""


class RayUnreachableError(PipelineError):
    """`ray_address` names a Ray cluster that does not answer."""


@dataclass
class RunSummary:
    """What a finished run reports to the CLI and the benchmark."""

    run_dir: Path
    mode: str
    updates: int
    wall_s: float
    train_wall_s: float  # from the first submitted group to the last update (no start-up)
    updates_per_hour: float
    ledger: dict[str, Any]
    lag_max: int
    final_metrics: dict[str, Any]
    resumed_from: int | None = None
    plots: list[Path] = field(default_factory=list)
    faults: dict[str, Any] = field(default_factory=dict)


@dataclass
class InFlight:
    """A group being generated: which task position, on which actor, from which version on."""

    task_index: int
    actor: int
    min_version: int  # the actor's acknowledged weights at submit time: a lower bound


class TaskStream:
    """An endless, reproducible order of tasks: position i is always the same task.

    Each pass over the task set is a fresh shuffle seeded by (seed, pass), so a resumed run only
    needs the position to continue exactly where it stopped.
    """

    def __init__(self, tasks: list[dict[str, Any]], seed: int) -> None:
        if not tasks:
            raise ValueError("the task set is empty; check tasks_split, task_categories, max_tasks")
        self.tasks = tasks
        self.seed = seed
        self._orders: dict[int, list[int]] = {}

    def __getitem__(self, index: int) -> dict[str, Any]:
        epoch, offset = divmod(index, len(self.tasks))
        if epoch not in self._orders:
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._orders[epoch] = order
        return self.tasks[self._orders[epoch][offset]]


def group_id_for(task_index: int) -> str:
    """Ids follow the task position, so a group re-run after a resume keeps its id."""
    return f"group-{task_index:08d}"


def load_task_rows(config: TrainConfig, split: str) -> list[dict[str, Any]]:
    """The env's own tasks of `split` (`envs.loading`: every env keeps its tasks)."""
    from envs.loading import env_tasks

    kwargs = dict(config.env_kwargs)
    if config.task_categories:
        kwargs["categories"] = config.task_categories
    rows = env_tasks(config.env, split, **kwargs)
    return rows[: config.max_tasks] if config.max_tasks else rows


def resolve_run_model(config: TrainConfig) -> Path:
    """The checkpoint the run's learner and rollout start from: `model`, or the `init_from`
    weights checked against it."""
    from agent_rl.hf_export import resolve_init_from
    from agent_rl.model_store import resolve_model

    model_dir = resolve_model(config.model, config.dtype)
    if config.init_from is None:
        return model_dir
    return resolve_init_from(config.init_from, model_dir)


def learner_settings(config: TrainConfig, model_dir: Path) -> LearnerSettings:
    return LearnerSettings(
        model_dir=model_dir,
        matched_kernels=config.matched_kernels,
        dtype=config.dtype,
        lr=config.lr,
        betas=config.betas,
        weight_decay=config.weight_decay,
        adam_eps=config.adam_eps,
        max_grad_norm=config.max_grad_norm,
        micro_batch_tokens=config.micro_batch_tokens,
        activation_checkpointing=config.activation_checkpointing,
        temperature=config.temperature,
        loss=LossSettings(clip=config.clip, is_level=config.is_level, kl_coef=config.kl_coef),
        diagnose_flat_groups=config.diagnose_flat_groups,
        share_prompt=config.share_prompt,
        seed=config.seed,
        device=config.learner_device,
    )


def rollout_model_dir(config: TrainConfig, model_dir: Path, run_dir: Path) -> Path:
    """The checkpoint the rollout engine loads: with matched kernels, the same weights under the
    `MatchedLlamaForCausalLM` architecture so vLLM runs the learner's kernels."""
    if not config.matched_kernels:
        return model_dir
    from kernels.checkpoint import use_matched_architecture

    return use_matched_architecture(model_dir, run_dir / "rollout_model")


def start_rollout_actors(config: TrainConfig, model_dir: Path) -> list[Any]:
    """Create the Ray rollout actors and begin building their engines (returns at once)."""
    from agent_rl.engine import EngineConfig
    from agent_rl.rollout import RolloutConfig, make_rollout_actor

    engine_config = EngineConfig(
        model=str(model_dir),
        dtype=config.dtype,
        lm_head_fp32=config.dtype == "float32",
        max_model_len=config.max_model_len,
        kv_cache_gib=config.kv_cache_gib,
        seed=config.seed,
        enable_prefix_caching=config.prefix_caching,
        cpu_cores=config.rollout_cpu_cores,
    )
    env_kwargs: dict[str, Any] = {
        "split": config.tasks_split, "max_turns": config.max_turns, **config.env_kwargs
    }
    if config.task_categories:
        env_kwargs["categories"] = config.task_categories
    if config.sandbox_timeout_s is not None:
        from sandbox import SandboxConfig

        env_kwargs["sandbox_config"] = SandboxConfig(timeout_s=config.sandbox_timeout_s)
    env_factory = (
        FaultyEnvFactory(config.env, env_kwargs, config.faults)
        if config.faults.env_faults_on
        else None
    )
    rollout_config = RolloutConfig(
        group_size=config.group_size,
        context_budget=config.max_model_len,
        max_tokens_per_turn=config.max_new_tokens,
        temperature=config.temperature,
        seed=config.seed,
        max_lag=config.effective_max_lag,
        env_id=config.env,
        env_kwargs=env_kwargs,
        env_threads=max(4, config.group_size * config.groups_in_flight_per_actor),
    )
    num_cpus = min(1.0, config.ray_num_cpus / config.num_rollout_actors)
    actors = [
        make_rollout_actor(
            engine_config,
            rollout_config,
            env_factory=env_factory,
            name=f"rollout-{i}-{os.getpid()}",
            num_cpus=num_cpus,
            max_restarts=config.max_actor_restarts,
        )
        for i in range(config.num_rollout_actors)
    ]
    return actors


def check_env_kwargs(config: TrainConfig) -> None:
    """Build the env once here, so a misspelled `env_kwargs` key fails before Ray and vLLM start
    instead of inside every rollout actor."""
    from envs.loading import make_env

    make_env(config.env, **config.env_kwargs).close()


def init_ray(config: TrainConfig) -> bool:
    """Join `ray_address` or start a local Ray; True if this call connected (so the run must
    disconnect when it ends), False if Ray was already up in this process.

    ray.init retries an unreachable address for minutes; a plain TCP probe fails in seconds.
    """
    import ray

    if ray.is_initialized():
        return False
    quiet = {} if config.show_worker_logs else {"log_to_driver": False,
                                                 "logging_level": logging.WARNING}
    address = config.ray_address
    if address:
        check_ray_address(address)
        ray.init(address=address, **quiet)
    else:
        ray.init(num_cpus=config.ray_num_cpus, include_dashboard=False, **quiet)
    _link_worker_logs(Path(config.out_dir))
    return True


WORKER_LOGS = "worker_logs"


def _link_worker_logs(run_dir: Path) -> None:
    """run_dir/worker_logs points at this Ray session's log folder (actors' and vLLM's output)."""
    from ray._private.worker import _global_node

    if _global_node is None:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    link = run_dir / WORKER_LOGS
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(_global_node.get_logs_dir_path(), target_is_directory=True)


def check_ray_address(address: str) -> None:
    """Raise RayUnreachableError unless something listens at `address` ("auto" is not probed)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as error:
        raise RayUnreachableError(
            f"no Ray cluster answers at ray_address {address!r} ({error}); start one with "
            "`ray start --head`, fix the address (host:port), or remove ray_address to run "
            "a local Ray"
        ) from error


class Pipeline:
    """One run's moving parts; `run()` drives them until `num_updates` updates are done."""

    def __init__(self, config: TrainConfig, on_update: OnUpdate | None = None,
                 on_status: OnStatus | None = None) -> None:
        import ray

        self.ray = ray
        self.config = config
        self.on_update = on_update
        self.on_status = on_status
        self.max_lag = config.effective_max_lag
        self.run_dir = Path(config.out_dir)
        # Everything a user can get wrong is checked before the run folder or Ray exists.
        model_dir = resolve_run_model(config)
        check_env_kwargs(config)
        self.tasks = TaskStream(load_task_rows(config, config.tasks_split), config.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dump_config(config, self.run_dir / "config.yaml")

        self.faults = FaultInjector(config.faults)
        self.started_ray = init_ray(config)
        self.actors: list[Any] = []
        try:
            self._start(config, model_dir)
        except BaseException:
            # Ctrl-C or a failure while engines start: nothing may outlive the command.
            self._shutdown(grace_s=5)
            raise

    def _start(self, config: TrainConfig, model_dir: Path) -> None:
        """Start the actors and the learner, resume from the latest checkpoint, sync weights."""
        self.actors = start_rollout_actors(
            config, rollout_model_dir(config, model_dir, self.run_dir)
        )
        starting = [actor.start.remote() for actor in self.actors]
        if config.learner_threads:
            import torch

            torch.set_num_threads(config.learner_threads)
        self.learner = Learner(learner_settings(config, model_dir))
        self.state = RunState()
        self.resumed_from: int | None = None
        checkpoint = latest_checkpoint(self.run_dir) if config.resume else None
        if checkpoint is not None:
            learner_state, self.state = load_checkpoint(checkpoint)
            self.learner.load_state_dict(learner_state)
            self.resumed_from = self.learner.version
            logger.info("resumed from %s at version %d", checkpoint, self.learner.version)
        self._wait_for_engines(starting)

        self.queue: list[Group] = list(self.state.queued_groups)
        self.rerun_indices = sorted(self.state.in_flight_task_indices)
        self.rerun_reasons: dict[int, str] = {}  # task index -> why it runs again (else resume)
        self.in_flight: dict[Any, InFlight] = {}
        self.pending_updates: dict[Any, tuple[int, int]] = {}  # ref -> (actor, version)
        self.restoring: dict[Any, tuple[int, int]] = {}  # ref -> (restarted actor, version)
        self.acked = [0] * len(self.actors)
        self.sent = [0] * len(self.actors)  # the newest weight version sent to each actor
        self.restarts = [0] * len(self.actors)
        self.killed_on_purpose: set[int] = set()
        self.weights_ref: Any = None
        self.delayed_broadcast: tuple[float, int, Any] | None = None  # (due, version, weights)
        self.kill_actor_pending = False
        self.hold_until_full = False
        self.untrained_peak = 0
        self.status = "running"
        self.weight_load_s: list[float] = []
        self.rollout_errors = 0
        self.metrics = MetricsWriter(self.run_dir)
        if self.resumed_from is not None:
            dropped = self.metrics.keep_through(self.resumed_from)
            if dropped:
                logger.info("dropped %d metrics records after update %d: they are trained again",
                            dropped, self.resumed_from)
        self.last_metrics: dict[str, Any] = {}
        self.filtered: list[Group] = []  # flat groups dynamic sampling consumed since the last update
        self.lag_max = 0
        if self.learner.version > 0:
            self._broadcast_weights()
            self._wait_for_acks()

    def _wait_for_engines(self, starting: list[Any]) -> None:
        """Wait for the actors' engines to start, saying now and then what is still awaited."""
        import ray

        began = time.monotonic()
        pending = list(starting)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=STATUS_EVERY_S)
            ray.get(ready)  # an actor that failed to start raises here, at once
            if pending:
                self._status(f"waiting for {len(pending)} of {len(starting)} rollout engine(s) "
                             f"to start, {time.monotonic() - began:.0f} s so far; their logs: "
                             f"{self.run_dir / WORKER_LOGS}")

    def _status(self, text: str) -> None:
        logger.info(text)
        if self.on_status is not None:
            self.on_status(text)

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        start = time.perf_counter()
        updates_at_start = self.learner.version
        try:
            while self.learner.version < self.config.num_updates and not self._out_of_time(start):
                self._send_due_broadcast()
                self._submit_while_allowed()
                if self.kill_actor_pending and self.in_flight:
                    self._kill_busiest_actor()
                batch = self._take_batch()
                if batch is not None:
                    self._update(batch)
                    self._inject_driver_faults()
                else:
                    self._wait_for_results(self._blocking_refs())
            train_wall = time.perf_counter() - start
            self._finish()
        except BaseException as error:
            # Ctrl-C and crashes too: leave an account of every group before going down.
            self.status = f"interrupted: {type(error).__name__}: {error}"
            self._save_ledger()
            raise
        finally:
            self.metrics.close()
            self._shutdown()
        done = self.learner.version - updates_at_start
        plots = _plot_quietly(self.run_dir)
        return RunSummary(
            run_dir=self.run_dir,
            mode=self.config.mode,
            updates=self.learner.version,
            wall_s=time.perf_counter() - start,
            train_wall_s=train_wall,
            updates_per_hour=3600.0 * done / train_wall if train_wall > 0 else 0.0,
            ledger=self.state.ledger.counts(),
            lag_max=self.lag_max,
            final_metrics=self.last_metrics,
            resumed_from=self.resumed_from,
            plots=plots,
            faults=self.fault_report(),
        )

    def fault_report(self) -> dict[str, Any]:
        """Faults injected and recovered by kind, actor restarts, and the queue's peak."""
        return {
            **self.faults.report(),
            "actor_restarts": sum(self.restarts),
            "untrained_peak": self.untrained_peak,
            "untrained_cap": self.config.groups_per_update * (self.max_lag + 1),
        }

    def _out_of_time(self, start: float) -> bool:
        limit = self.config.max_wall_s
        return limit is not None and time.perf_counter() - start > limit

    def _may_submit(self, actor: int) -> bool:
        config = self.config
        untrained = len(self.queue) + len(self.in_flight)
        still_needed = (config.num_updates - self.learner.version) * config.groups_per_update
        busy = sum(1 for flight in self.in_flight.values() if flight.actor == actor)
        return (
            untrained < config.groups_per_update * (self.max_lag + 1)
            and untrained < still_needed
            and busy < config.groups_in_flight_per_actor
            and self.learner.version - self.acked[actor] <= self.max_lag
        )

    def _submit_while_allowed(self) -> None:
        for actor_index, actor in enumerate(self.actors):
            while self._may_submit(actor_index):
                if self.rerun_indices:
                    task_index = self.rerun_indices.pop(0)
                    reason = self.rerun_reasons.pop(task_index, "resume")
                    self.state.ledger.record_rerun(group_id_for(task_index), reason)
                else:
                    task_index = self.state.next_task_index
                    self.state.next_task_index += 1
                ref = actor.generate_group.remote(
                    self.tasks[task_index], self.config.group_size, task_index
                )
                self.in_flight[ref] = InFlight(task_index, actor_index, self.acked[actor_index])
        self.untrained_peak = max(self.untrained_peak, len(self.queue) + len(self.in_flight))

    def _blocking_refs(self) -> list[Any]:
        """What the loop waits on now: the groups the lag bound says to wait for, else anything."""
        next_version = self.learner.version + 1
        at_risk = [
            ref
            for ref, flight in self.in_flight.items()
            if next_version - flight.min_version > self.max_lag
        ]
        if at_risk and len(self.queue) >= self.config.groups_per_update:
            return at_risk
        return list(self.in_flight) + list(self.pending_updates) + list(self.restoring)

    def _wait_for_results(self, refs: list[Any]) -> None:
        if not refs and self.delayed_broadcast is not None:
            time.sleep(max(0.0, self.delayed_broadcast[0] - time.monotonic()))
            return
        if not refs:
            raise PipelineError(
                f"nothing to wait for at version {self.learner.version} with {len(self.queue)} "
                "queued groups; the submit rules admit no work (a bug in the pipeline)"
            )
        waited = time.perf_counter()
        ready: list[Any] = []
        while not ready:
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=POLL_S)
            if self._broadcast_is_due():
                return
            if time.perf_counter() - waited > self.config.stall_timeout_s:
                raise PipelineError(
                    f"no rollout finished for {self.config.stall_timeout_s:.0f}s with "
                    f"{len(self.in_flight)} groups in flight; raise stall_timeout_s or check the "
                    "rollout actors' logs"
                )
        # Take everything already finished, not just the first, to keep the queue fresh.
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            if ref in self.pending_updates:
                self._acknowledge(ref)
            elif ref in self.restoring:
                self._finish_restore(ref)
            elif ref in self.in_flight:  # not settled already by an actor's death
                self._collect(ref)

    def _collect(self, ref: Any) -> None:
        flight = self.in_flight.pop(ref)
        group_id = group_id_for(flight.task_index)
        ledger = self.state.ledger
        try:
            group: Group = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as error:
            self._requeue(flight.task_index, "actor_died")
            self._actor_died(flight.actor, error)
            return
        except self.ray.exceptions.RayError as error:
            ledger.record_generated(group_id)
            ledger.record_dropped(group_id, "rollout_error")
            self._count_error(f"task position {flight.task_index}: {error}")
            return
        group.group_id = group_id
        for trajectory in group.trajectories:
            trajectory.group_id = group_id
        ledger.record_generated(group_id)
        for trajectory in group.trajectories:
            self.faults.count_episode(trajectory.info)
        broken = [t for t in group.trajectories if t.end_reason == END_ENV_ERROR]
        if broken:
            # An episode the env or engine broke has no verdict; its reward 0 would be a lie.
            ledger.record_dropped(group_id, "env_error")
            errors = [str(t.info.get("error")) for t in broken]
            if not all(InjectedEnvFault.__name__ in error for error in errors):
                self._count_error(f"episode of task {group.task_id}: {errors[0]}")
            return
        if self.config.dynamic_sampling and not has_reward_variance(group.rewards):
            # No gradient in it and never shown to the learner: dropped with its reason, charted
            # with the next update, never a step alone.
            ledger.record_dropped(group_id, FLAT_FILTERED)
            self.filtered.append(group)
            return
        self.queue.append(group)

    def _requeue(self, task_index: int, reason: str) -> None:
        """Run a task position again under the same group id: its rollout was lost, not done."""
        self.rerun_indices.append(task_index)
        self.rerun_indices.sort()
        self.rerun_reasons[task_index] = reason

    def _actor_died(self, actor: int, error: BaseException) -> None:
        """Settle everything the dead actor held, then restore it once Ray has restarted it."""
        if self.acked[actor] == RESTORING:
            return
        self.restarts[actor] += 1
        if self.restarts[actor] > self.config.max_actor_restarts:
            raise PipelineError(
                f"rollout actor {actor} died {self.restarts[actor]} times (max_actor_restarts = "
                f"{self.config.max_actor_restarts}); the last: {error}"
            ) from error
        logger.warning("rollout actor %d died (%s); restarting it", actor, error)
        for ref, flight in list(self.in_flight.items()):
            if flight.actor == actor:
                del self.in_flight[ref]
                self._requeue(flight.task_index, "actor_died")
        for ref, (owner, _) in list(self.pending_updates.items()):
            if owner == actor:
                del self.pending_updates[ref]
        self.acked[actor] = RESTORING
        self._restore(actor)

    def _restore(self, actor: int) -> None:
        """Load the current weights and version into a restarted actor before it samples again.

        Calls made to a restarting Ray actor wait until its constructor has run again.
        """
        handle = self.actors[actor]
        version = self.learner.version
        if self.weights_ref is None:  # still the initial weights the actor starts from
            ref = handle.start.remote()
        else:
            ref = handle.update_weights.remote(version, self.weights_ref, version)
        self.restoring[ref] = (actor, version)
        self.sent[actor] = version

    def _finish_restore(self, ref: Any) -> None:
        from agent_rl.weight_sync import WeightVersionError

        actor, version = self.restoring.pop(ref)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.ActorUnavailableError:
            # Still restarting (its engine takes a while): ask again shortly.
            time.sleep(POLL_S)
            self._restore(actor)
            return
        except self.ray.exceptions.RayActorError as error:
            self.acked[actor] = 0  # a new death, not the one being restored from
            self._actor_died(actor, error)
            return
        except WeightVersionError:
            pass  # a broadcast reached the new incarnation first: it is already this new
        self.acked[actor] = version
        logger.info("rollout actor %d restored at version %d", actor, version)
        if actor in self.killed_on_purpose:
            self.killed_on_purpose.discard(actor)
            self.faults.recovered[KILL_ACTOR] += 1

    def _count_error(self, description: str) -> None:
        self.rollout_errors += 1
        logger.warning("rollout failed (%d so far): %s", self.rollout_errors, description)
        if self.rollout_errors > self.config.max_rollout_errors:
            raise PipelineError(
                f"{self.rollout_errors} rollouts failed (max_rollout_errors = "
                f"{self.config.max_rollout_errors}); the last: {description}"
            )

    def _acknowledge(self, ref: Any) -> None:
        actor, version = self.pending_updates.pop(ref)
        try:
            timing = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as error:
            self._actor_died(actor, error)
            return
        except self.ray.exceptions.RayError as error:
            raise PipelineError(
                f"rollout actor {actor} failed to load weights v{version}; its engine is gone, "
                f"see the actor's log above: {error}"
            ) from error
        self.acked[actor] = max(self.acked[actor], version)
        self.weight_load_s.append(timing.total_s)

    def _take_batch(self) -> list[Group] | None:
        """The oldest usable groups for the next update, or None if the loop must wait first."""
        if self._blocking_refs_are_at_risk() or self._holding_until_full():
            return None
        version = self.learner.version
        # Ties go by group id (= task position), so a sync run's order does not hang on timing.
        self.queue.sort(key=lambda group: (group.oldest_version, group.group_id))
        while self.queue and group_lag(self.queue[0], version) > self.max_lag:
            stale = self.queue.pop(0)
            self.state.ledger.record_dropped(stale.group_id, "stale")
            logger.warning("dropped stale group %s (lag %d)", stale.group_id,
                           group_lag(stale, version))
        if len(self.queue) < self.config.groups_per_update:
            return None
        batch = self.queue[: self.config.groups_per_update]
        del self.queue[: self.config.groups_per_update]
        return batch

    def _holding_until_full(self) -> bool:
        """The fill-queue fault: no update until the submit rules admit no more work."""
        if not self.hold_until_full:
            return False
        actors = range(len(self.actors))
        if self.in_flight or self.restoring or any(self._may_submit(a) for a in actors):
            return True
        self.hold_until_full = False
        self.faults.recovered[FILL_QUEUE] += 1
        logger.info("queue filled to %d untrained groups; training resumes", len(self.queue))
        return False

    def _blocking_refs_are_at_risk(self) -> bool:
        next_version = self.learner.version + 1
        return len(self.queue) >= self.config.groups_per_update and any(
            next_version - flight.min_version > self.max_lag for flight in self.in_flight.values()
        )

    def _update(self, batch: list[Group]) -> None:
        update_start = time.perf_counter()
        try:
            metrics = self.learner.train_step(batch)
        except BaseException:
            self.queue[:0] = batch  # not trained: the ledger must still find them queued
            raise
        ledger = self.state.ledger
        for group, flat in zip(batch, _flat_groups(batch), strict=True):
            ledger.record_trained(group.group_id, zero_variance=flat)
        metrics["groups/task_ids"] = [group.task_id for group in batch]
        if self.filtered:
            metrics.update(group_metrics(self.filtered + batch))
            metrics["charts/zero_variance_groups"] += len(self.filtered)
            metrics["charts/filtered_groups"] = len(self.filtered)
            self.filtered = []
        self.lag_max = max(self.lag_max, int(metrics.get("lag/max", 0)))
        sync_start = time.perf_counter()
        self._broadcast_weights()
        if self.max_lag == 0:
            self._wait_for_acks()
        version = self.learner.version
        metrics.update(
            {
                "perf/weight_publish_s": time.perf_counter() - sync_start,
                "perf/update_s": time.perf_counter() - update_start,
                "perf/actor_weight_load_s": (
                    sum(self.weight_load_s) / len(self.weight_load_s) if self.weight_load_s else 0.0
                ),
                "pipeline/queued_groups": len(self.queue),
                "pipeline/in_flight_groups": len(self.in_flight),
                **{f"ledger/{k}": v for k, v in ledger.counts().items() if isinstance(v, int)},
            }
        )
        self.weight_load_s.clear()
        if self.config.eval_every and version % self.config.eval_every == 0:
            metrics.update(self._evaluate())
        self.metrics.write(version, metrics)
        self.last_metrics = {"step": version, **metrics}
        if self.config.checkpoint_every and version % self.config.checkpoint_every == 0:
            self._checkpoint()
        if self.on_update is not None:
            self.on_update(self.last_metrics)

    def _broadcast_weights(self) -> None:
        """One `ray.put`; every actor receives the same object ref and loads it in flight."""
        from agent_rl.weight_sync import publish_weights

        version = self.learner.version
        self.weights_ref = publish_weights(self.learner.rollout_state_dict())
        delay = self.faults.broadcast_delay_s()
        if self.delayed_broadcast is not None:  # superseded: the newer weights go instead
            self.delayed_broadcast = None
            self.faults.recovered[DELAY_BROADCAST] += 1
        if delay > 0:
            self.faults.injected[DELAY_BROADCAST] += 1
            self.delayed_broadcast = (time.monotonic() + delay, version, self.weights_ref)
            return
        self._send_weights(version, self.weights_ref)

    def _send_weights(self, version: int, weights_ref: Any) -> None:
        for index, actor in enumerate(self.actors):
            if self.acked[index] == RESTORING or self.sent[index] >= version:
                continue  # a restore carries the newest weights; never send an actor older ones
            ref = actor.update_weights.remote(version, weights_ref, version)
            self.pending_updates[ref] = (index, version)
            self.sent[index] = version

    def _broadcast_is_due(self) -> bool:
        return self.delayed_broadcast is not None and time.monotonic() >= self.delayed_broadcast[0]

    def _send_due_broadcast(self, wait: bool = False) -> None:
        if self.delayed_broadcast is None:
            return
        due, version, weights_ref = self.delayed_broadcast
        if wait:
            time.sleep(max(0.0, due - time.monotonic()))
        elif time.monotonic() < due:
            return
        self.delayed_broadcast = None
        self._send_weights(version, weights_ref)
        self.faults.recovered[DELAY_BROADCAST] += 1

    def _wait_for_acks(self) -> None:
        """Until every actor has loaded the newest weights; a hung load stops the run after
        stall_timeout_s instead of holding it forever."""
        self._send_due_broadcast(wait=True)
        while self.pending_updates or self.restoring:
            ref = next(iter(self.pending_updates or self.restoring))
            ready, _ = self.ray.wait([ref], timeout=self.config.stall_timeout_s)
            if not ready:
                raise PipelineError(
                    f"a rollout actor has not loaded weights v{self.learner.version} within "
                    f"{self.config.stall_timeout_s:.0f}s; raise stall_timeout_s or check the "
                    "rollout actors' logs"
                )
            if ref in self.pending_updates:
                self._acknowledge(ref)
            else:
                self._finish_restore(ref)

    def _inject_driver_faults(self) -> None:
        """Fire the driver faults due after this update (see `agent_rl.faults`)."""
        due = self.faults.after_update(self.learner.version)
        for kind in sorted(due - {DELAY_BROADCAST}):  # a delay is counted when a broadcast waits
            self.faults.injected[kind] += 1
        if FILL_QUEUE in due:
            self.hold_until_full = True
        if KILL_ACTOR in due:
            self.kill_actor_pending = True
        if KILL_LEARNER in due:
            raise LearnerKilled(
                f"fault injected: the learner died after update {self.learner.version}; run "
                f"again on {self.run_dir} to resume from its last checkpoint"
            )

    def _kill_busiest_actor(self) -> None:
        """Kill the actor with the most groups in flight, mid-episode; Ray restarts it."""
        self.kill_actor_pending = False
        busy = [flight.actor for flight in self.in_flight.values()]
        actor = max(set(busy), key=busy.count)
        logger.warning("fault injected: killing rollout actor %d with %d groups in flight",
                       actor, busy.count(actor))
        self.killed_on_purpose.add(actor)
        self.ray.kill(self.actors[actor], no_restart=False)

    def _evaluate(self) -> dict[str, float]:
        """Mean reward of one episode on each of `eval_tasks` held-out tasks (not trained on).

        The actors load the current weights first, so the figure belongs to this version; each
        task keeps its seed from one evaluation to the next, and an episode the env broke has no
        verdict, so it is counted apart rather than as a reward of 0.
        """
        self._wait_for_acks()
        rows = load_task_rows(self.config, self.config.eval_split)[: self.config.eval_tasks]
        refs = [
            self.actors[i % len(self.actors)].generate_group.remote(row, 1, group_seed=i)
            for i, row in enumerate(rows)
        ]
        episodes = [t for group in self.ray.get(refs) for t in group.trajectories]
        rewards = [t.reward for t in episodes if t.end_reason != END_ENV_ERROR]
        return {
            "eval/reward_mean": sum(rewards) / len(rewards) if rewards else float("nan"),
            "eval/env_errors": len(episodes) - len(rewards),
        }

    def _checkpoint(self) -> None:
        self.state.queued_groups = list(self.queue)
        self.state.in_flight_task_indices = sorted(
            [flight.task_index for flight in self.in_flight.values()] + self.rerun_indices
        )
        self.state.ledger.check(pending={group.group_id for group in self.queue})
        save_checkpoint(
            self.run_dir, self.learner.state_dict(), self.state, self.config.keep_checkpoints
        )
        self._save_ledger()

    def _save_ledger(self) -> None:
        """`ledger.json`: this process's account of every group, with where the run stands."""
        try:
            save_ledger(
                self.run_dir,
                self.state.ledger,
                status=self.status,
                version=self.learner.version,
                queued=[group.group_id for group in self.queue],
                in_flight=sorted(group_id_for(f.task_index) for f in self.in_flight.values()),
                to_rerun={
                    group_id_for(index): self.rerun_reasons.get(index, "resume")
                    for index in self.rerun_indices
                },
                faults=self.fault_report(),
            )
        except OSError as error:  # a full disk must not hide the error that ended the run
            logger.error("could not write the ledger to %s: %s", self.run_dir, error)

    def _finish(self) -> None:
        """Account for the groups left over, check the ledger, write the final checkpoint."""
        self.status = "finished"
        self._wait_for_acks()  # delayed weights and restarts land: actors end current
        for group in self.queue:
            self.state.ledger.record_dropped(group.group_id, "run_ended")
        self.queue.clear()
        abandoned = len(self.in_flight)
        # Running groups were never generated: a resumed run re-runs their task positions.
        self._checkpoint()
        self.state.ledger.check()
        logger.info(
            "run finished at version %d: %s; %d groups abandoned in flight",
            self.learner.version,
            self.state.ledger.counts(),
            abandoned,
        )

    def _shutdown(self, grace_s: float = 30) -> None:
        """Stop the actors and, if this run started Ray, Ray and every process below this one
        (vLLM's engine processes would otherwise outlive a killed actor)."""
        descendants = _descendant_processes() if self.started_ray else []
        for actor in self.actors:
            try:
                self.ray.get(actor.shutdown.remote(), timeout=grace_s)
            except BaseException as error:  # noqa: BLE001 - best effort on the way out
                logger.warning("rollout actor did not shut down cleanly: %s", error)
            self.ray.kill(actor)
        if self.started_ray:
            self.ray.shutdown()
            _stop_processes(descendants)


def train(config: TrainConfig, on_update: OnUpdate | None = None,
          on_status: OnStatus | None = None) -> RunSummary:
    """Run RL training as `config` says; `on_update(metrics)` is called after every update and
    `on_status(text)` while a slow start-up waits."""
    return Pipeline(config, on_update, on_status).run()


def _flat_groups(groups: list[Group]) -> list[bool]:
    return [not has_reward_variance(group.rewards) for group in groups]


def _descendant_processes() -> list[Any]:
    import psutil

    return psutil.Process().children(recursive=True)


def _stop_processes(processes: list[Any], grace_s: float = 5.0) -> None:
    """Terminate what is still running of `processes`, then kill what ignores that."""
    import psutil

    alive = [p for p in processes if p.is_running()]
    for process in alive:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, stubborn = psutil.wait_procs(alive, timeout=grace_s)
    for process in stubborn:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    if alive:
        logger.info("stopped %d leftover child process(es)", len(alive))


def _plot_quietly(run_dir: Path) -> list[Path]:
    from agent_rl.plot import plot_run

    try:
        return plot_run(run_dir)
    except FileNotFoundError:
        return []
