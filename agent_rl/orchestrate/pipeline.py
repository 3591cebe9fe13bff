"""The training run: rollout actors on Ray and one learner (of `learner.world_size` ranks),
working at the same time.

`train(config)` is the entry point `agent-rl train CONFIG` calls. Three parts, one job each:
- the `Scheduler` decides: which actor may start a group, what the loop waits for, which groups
  form the next update and which are dropped (the lag rule and the ledger live there);
- the `ActorPool` does: it submits groups to the Ray actors, broadcasts weights, restarts dead
  actors and reports what finished as events;
- the `Learner` trains: one optimizer update per batch.
The loop below feeds the pool's events to the scheduler and the scheduler's batches to the
learner. With `max_lag = 0` the same loop is synchronous RL (`max_lag: 0`): generate a batch,
wait for it, train, wait for every actor to load the new weights, repeat. With
`pipeline.weight_sync_every: K` the weights go out only after every K-th update (the
scheduler's `weights_due`), so the actors sample up to K - 1 updates behind the learner.

Faults are hooks (`agent_rl.orchestrate.hooks`): the injected ones of `agent_rl.orchestrate.faults` join
through `DriverFaults` at the hook points, not as branches in the loop. Whatever ends the run
(the end, an error, Ctrl-C), `ledger.json` in the run dir says what happened to every group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent_rl.config import ConfigError, dump_config
from agent_rl.learn.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agent_rl.learn.data_parallel import DataParallelLearner
from agent_rl.learn.hf_export import EXPORT_DIR, export_hf_checkpoint
from agent_rl.learn.learner import Learner
from agent_rl.learn.update_metrics import group_metrics
from agent_rl.metrics import MetricsWriter, write_summary
from agent_rl.orchestrate.actor_pool import (
    ActorDied,
    ActorPool,
    Event,
    GroupDone,
    GroupFailed,
    PipelineError,
    WeightsLoaded,
)
from agent_rl.orchestrate.fault_hooks import DriverFaults
from agent_rl.orchestrate.faults import FaultInjector, is_injected_error
from agent_rl.orchestrate.hooks import Hooks
from agent_rl.orchestrate.launch import (
    check_agent,
    check_env_kwargs,
    make_learner,
    resolve_run_model,
    rollout_model_dir,
    start_rollout_actors,
)
from agent_rl.orchestrate.ledger import save_ledger
from agent_rl.orchestrate.periodic_eval import held_out_reward
from agent_rl.orchestrate.ray_session import (
    WORKER_LOGS,
    descendant_processes,
    init_ray,
    stop_ray,
)
from agent_rl.orchestrate.run_state import RunState, changed_run_settings
from agent_rl.orchestrate.scheduler import Scheduler, SchedulerLimits
from agent_rl.orchestrate.synced_weights import (
    last_sync_version,
    load_synced_weights,
    save_synced_weights,
)
from agent_rl.orchestrate.tasks import TaskStream, load_task_rows
from agent_rl.train_config import TrainConfig
from agent_rl.trajectory import END_ENV_ERROR, Group

logger = logging.getLogger(__name__)

OnUpdate = Callable[[dict[str, Any]], None]
OnStatus = Callable[[str], None]


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
    faults: dict[str, Any] = field(default_factory=dict)


def train(config: TrainConfig, on_update: OnUpdate | None = None,
          on_status: OnStatus | None = None) -> RunSummary:
    """Run RL training as `config` says; `on_update(metrics)` is called after every update and
    `on_status(text)` while a slow start-up waits. The summary is saved as `summary.json`
    too (`agent-rl simulate --calibrate` reads its timings)."""
    summary = Pipeline(config, on_update, on_status).run()
    write_summary(summary.run_dir, {
        "mode": summary.mode, "updates": summary.updates, "wall_s": summary.wall_s,
        "train_wall_s": summary.train_wall_s, "updates_per_hour": summary.updates_per_hour,
        "lag_max": summary.lag_max, "resumed_from": summary.resumed_from,
        "ledger": summary.ledger,
    })
    return summary


def rollout_time_shares(time_use: dict[str, float]) -> dict[str, float]:
    """The rollout actors' time since their first group as shares: decoding, waiting on envs
    (episodes running, none sampling), idle (none running)."""
    total = sum(time_use.values())
    if total <= 0:
        return {}
    return {f"rollout/{key.removesuffix('_s')}_share": seconds / total
            for key, seconds in time_use.items()}


def check_resumable(config: TrainConfig, run_dir: Path) -> None:
    """Refuse to resume a run under other settings: its checkpoints, metrics and ledger would
    mix two runs (a changed learning rate went on from the old run's update 19 silently)."""
    saved = run_dir / "config.yaml"
    if not config.resume or latest_checkpoint(run_dir) is None or not saved.exists():
        return
    changes = changed_run_settings(yaml.safe_load(saved.read_text()) or {},
                                   config.model_dump(mode="json"))
    if changes:
        raise ConfigError(f"{run_dir} holds a run started with other settings ("
                          f"{'; '.join(changes)}); resuming would mix the two. Give another "
                          "out_dir, delete that one, or set resume: false to start over there")


class Pipeline:
    """One run's parts; `run()` drives them until `num_updates` updates are done."""

    def __init__(self, config: TrainConfig, on_update: OnUpdate | None = None,
                 on_status: OnStatus | None = None) -> None:
        self.config = config
        self.on_update = on_update
        self.on_status = on_status
        self.run_dir = Path(config.out_dir)
        # Everything a user can get wrong is checked before the run folder or Ray exists.
        model_dir = self.model_dir = resolve_run_model(config)
        check_env_kwargs(config)
        check_agent(config)
        self.tasks = TaskStream(load_task_rows(config, config.env.split), config.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        check_resumable(config, self.run_dir)
        dump_config(config, self.run_dir / "config.yaml")

        self.faults = FaultInjector(config.faults)
        self.hooks = Hooks([DriverFaults(self.faults, self.run_dir)])
        self.started_ray = init_ray(config)
        self.pool: ActorPool | None = None
        self.learner: Learner | DataParallelLearner | None = None
        try:
            self._start(model_dir)
        except BaseException:
            # Ctrl-C or a failure while engines start: nothing may outlive the command.
            self._shutdown(grace_s=5)
            raise

    def _start(self, model_dir: Path) -> None:
        """Start the actors and the learner, resume from the latest checkpoint, sync weights."""
        import ray

        config = self.config
        actors = start_rollout_actors(config, rollout_model_dir(config, model_dir, self.run_dir))
        self.pool = ActorPool(ray, actors, config.pipeline.max_actor_restarts, self.hooks,
                              config.pipeline.stall_timeout_s)
        if config.learner.threads:
            import torch

            torch.set_num_threads(config.learner.threads)
        self.learner = make_learner(config, model_dir)
        state, self.resumed_from = RunState(), None
        checkpoint = latest_checkpoint(self.run_dir) if config.resume else None
        if checkpoint is not None:
            learner_state, saved = load_checkpoint(checkpoint)
            state = RunState.from_dict(saved)
            self.learner.load_state_dict(learner_state)
            self.resumed_from = self.learner.version
            logger.info("resumed from %s at version %d", checkpoint, self.learner.version)
        self.pool.start(self._status, self.run_dir / WORKER_LOGS)
        self.scheduler = Scheduler(SchedulerLimits.of(config.pipeline, len(self.pool.actors)), state,
                                   self.learner.version, self.hooks)
        self.metrics = MetricsWriter(self.run_dir)
        if self.resumed_from is not None and (dropped := self.metrics.keep_through(
                self.resumed_from)):
            logger.info("dropped %d metrics records after update %d: they are trained again",
                        dropped, self.resumed_from)
        self.status = "running"
        self.rollout_errors = 0
        self.weight_load_s: list[float] = []
        self.last_metrics: dict[str, Any] = {}
        self._resume_rollout_weights()

    def _resume_rollout_weights(self) -> None:
        """Give the actors the weights they held when the run stopped: the last sync's, so a
        resumed run with a sparse weight sync goes on at the lag it had."""
        version = self.learner.version
        synced = last_sync_version(version, self.config.pipeline.weight_sync_every)
        if synced == 0:
            return  # the actors start on the initial weights
        weights = (self.learner.rollout_state_dict() if synced == version
                   else load_synced_weights(self.run_dir, synced))
        if weights is None:
            logger.warning("no copy of the weights synced at version %d in %s: the actors take "
                           "version %d's, so the lag starts again from 0", synced, self.run_dir,
                           version)
            synced, weights = version, self.learner.rollout_state_dict()
        self.pool.broadcast(synced, weights)
        self._handle(self.pool.wait_for_weights(synced))

    def _status(self, text: str) -> None:
        logger.info(text)
        if self.on_status is not None:
            self.on_status(text)

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        start = time.perf_counter()
        updates_at_start = self.learner.version
        scheduler, pool = self.scheduler, self.pool
        assert pool is not None
        try:
            while self.learner.version < self.config.pipeline.num_updates and not self._out_of_time(start):
                pool.send_due_broadcast()
                for actor in range(len(pool.actors)):
                    while scheduler.may_submit(actor):
                        work = scheduler.submit(actor)
                        pool.submit(work, self.tasks[work.task_index], self.config.rollout.group_size)
                self.hooks.tick(scheduler, pool)
                batch = scheduler.take_batch()
                if batch is not None:
                    self._update(batch)
                    self.hooks.after_update(self.learner.version)
                else:
                    wait_for = scheduler.must_wait_for()
                    self._handle(pool.wait(None if wait_for is None
                                           else {work.ticket for work in wait_for}))
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
        return RunSummary(
            run_dir=self.run_dir,
            mode=self.config.pipeline.mode,
            updates=self.learner.version,
            wall_s=time.perf_counter() - start,
            train_wall_s=train_wall,
            updates_per_hour=3600.0 * done / train_wall if train_wall > 0 else 0.0,
            ledger=scheduler.ledger.counts(),
            lag_max=scheduler.lag_max,
            final_metrics=self.last_metrics,
            resumed_from=self.resumed_from,
            faults=self.fault_report(),
        )

    def _out_of_time(self, start: float) -> bool:
        limit = self.config.pipeline.max_wall_s
        return limit is not None and time.perf_counter() - start > limit

    def _handle(self, events: list[Event]) -> None:
        """Tell the scheduler what the actors did."""
        for event in events:
            if isinstance(event, GroupDone):
                for trajectory in event.group.episode_ends:
                    self.hooks.episode_finished(trajectory.info)
                if self.scheduler.finished(event.ticket, event.group) == END_ENV_ERROR:
                    self._env_error(event.group)
            elif isinstance(event, GroupFailed):
                work = self.scheduler.failed(event.ticket)
                self._count_error(f"task position {work.task_index}: {event.error}")
            elif isinstance(event, ActorDied):
                self.scheduler.actor_lost(event.actor)
                # The newest published weights, which with a sparse weight sync are older
                # than the learner's: a restored actor samples what the others sample.
                self.pool.restore(event.actor, self.pool.weights_version, event.error)
            elif isinstance(event, WeightsLoaded):
                self.scheduler.actor_acked(event.actor, event.version)
                if event.load_s is not None:
                    self.weight_load_s.append(event.load_s)

    def _env_error(self, group: Group) -> None:
        broken = [t for t in group.trajectories if t.end_reason == END_ENV_ERROR]
        if not all(is_injected_error(t.info) for t in broken):
            self._count_error(f"episode of task {group.task_id}: {broken[0].info.get('error')}")

    def _count_error(self, description: str) -> None:
        self.rollout_errors += 1
        logger.warning("rollout failed (%d so far): %s", self.rollout_errors, description)
        if self.rollout_errors > self.config.pipeline.max_rollout_errors:
            raise PipelineError(
                f"{self.rollout_errors} rollouts failed (max_rollout_errors = "
                f"{self.config.pipeline.max_rollout_errors}); the last: {description}"
            )

    def _update(self, batch: list[Group]) -> None:
        """Train one update on `batch`, broadcast the weights, log, evaluate, checkpoint."""
        update_start = time.perf_counter()
        try:
            result = self.learner.train_step(batch)
        except BaseException:
            self.scheduler.untrain(batch)  # not trained: the ledger must still find them queued
            raise
        metrics = result.metrics
        filtered = self.scheduler.trained(batch, result.lag_max)
        metrics["groups/task_ids"] = [group.task_id for group in batch]
        if filtered:
            metrics.update(group_metrics(filtered + batch))
            metrics["charts/zero_variance_groups"] += len(filtered)
            metrics["charts/filtered_groups"] = len(filtered)
        sync_start = time.perf_counter()
        version = self.learner.version
        synced = self.scheduler.weights_due(version)
        if synced:
            weights = self.learner.rollout_state_dict()
            self.pool.broadcast(version, weights)
            if self.config.pipeline.weight_sync_every > 1:
                save_synced_weights(self.run_dir, version, weights)
        if self.config.pipeline.max_lag == 0:
            self._handle(self.pool.wait_for_weights(version))
        loads = self.weight_load_s
        metrics.update({
            "pipeline/weight_sync": int(synced),
            "pipeline/rollout_weights_version": self.pool.weights_version,
            "perf/weight_publish_s": time.perf_counter() - sync_start,
            "perf/update_s": time.perf_counter() - update_start,
            "perf/actor_weight_load_s": sum(loads) / len(loads) if loads else 0.0,
            "pipeline/queued_groups": len(self.scheduler.queue),
            "pipeline/in_flight_groups": len(self.scheduler.in_flight),
            **{f"ledger/{k}": v for k, v in self.scheduler.ledger.counts().items()
               if isinstance(v, int)},
        })
        loads.clear()
        metrics.update(rollout_time_shares(self.pool.time_use()))
        if (every := self.config.pipeline.eval_every) and version % every == 0:
            self._handle(self.pool.wait_for_weights(version))  # the figure is this version's
            metrics.update(held_out_reward(self.pool, self.config))
        self.metrics.write(version, metrics)
        self.last_metrics = {"step": version, **metrics}
        if (every := self.config.pipeline.checkpoint_every) and version % every == 0:
            self._checkpoint()
        if self.on_update is not None:
            self.on_update(self.last_metrics)

    # -- what the run leaves behind ------------------------------------------------------------

    def fault_report(self) -> dict[str, Any]:
        """Faults injected and recovered by kind, actor restarts, and the queue's peak."""
        return {
            **self.faults.report(),
            "actor_restarts": sum(self.pool.restarts),
            "learner_rank_restarts": (self.learner.restarts
                                      if isinstance(self.learner, DataParallelLearner) else 0),
            "untrained_peak": self.scheduler.untrained_peak,
            "untrained_cap": self.scheduler.untrained_cap,
        }

    def _checkpoint(self) -> None:
        save_checkpoint(self.run_dir, self.learner.state_dict(), self.scheduler.snapshot().to_dict(),
                        self.config.pipeline.keep_checkpoints)
        self._save_ledger()

    def _save_ledger(self) -> None:
        """`ledger.json`: this process's account of every group, with where the run stands."""
        try:
            save_ledger(self.run_dir, self.scheduler.ledger, status=self.status,
                        **self.scheduler.ledger_extras(), faults=self.fault_report())
        except OSError as error:  # a full disk must not hide the error that ended the run
            logger.error("could not write the ledger to %s: %s", self.run_dir, error)

    def _finish(self) -> None:
        """Account for the groups left over, check the ledger, write the final checkpoint."""
        self.status = "finished"
        self._handle(self.pool.wait_for_weights(self.learner.version))  # loads settle
        self.scheduler.end()
        abandoned = len(self.scheduler.in_flight)
        # Running groups were never generated: a resumed run re-runs their task positions.
        self._checkpoint()
        self.scheduler.ledger.check()
        final = latest_checkpoint(self.run_dir)
        if final is not None:  # as a Hugging Face folder too: eval and init_from load it
            export_hf_checkpoint(self.learner.rollout_state_dict(), self.model_dir,
                                 final / EXPORT_DIR)
        logger.info("run finished at version %d: %s; %d groups abandoned in flight",
                    self.learner.version, self.scheduler.ledger.counts(), abandoned)

    def _shutdown(self, grace_s: float = 30) -> None:
        """Stop the actors and, if this run started Ray, Ray and every process below this one
        (a joined cluster's processes are not the run's: it only disconnects)."""
        started_local = self.started_ray and not self.config.pipeline.ray_address
        if self.learner is not None:
            self.learner.close()  # its other ranks first: they are processes below this one
        descendants = descendant_processes() if started_local else []
        if self.pool is not None:
            self.pool.shutdown(grace_s)
        if self.started_ray:
            stop_ray(descendants)
