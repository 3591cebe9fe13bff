"""`learner.world_size` ranks driven as one learner: rank 0 here, ranks 1..N-1 as Ray actors.

Rank 0 is a `Learner` in the calling process, so the weights for the rollout and the state for a
checkpoint are at hand with no copy between processes (every rank holds the same full state).
Ranks 1..N-1 are Ray actors, placed as the rollout actors are (`pipeline.learner_resources`),
that join rank 0's process group and run what rank 0 runs: each `train_step` runs on every rank
at once, each on its share of the groups, and the gradients meet in one all-reduce
(`agent_rl.learn.distributed`). Ray is the one launcher: the pipeline's Ray, or a local one this
learner starts when none is up (the benchmark, a script).

A rank 1..N-1 that dies or fails is restarted: the learner tears the group down, starts the
ranks again in a new group and gives them rank 0's state, then trains the update again. Rank 0's
state is the restart point because an update's collectives all come before its optimizer step:
a collective that fails leaves rank 0 where the update began, and a rank that fails after the
last collective leaves rank 0's update whole. Rank 0 failing on its own ends the run as a
single learner's failure does (it resumes from the last checkpoint).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from pathlib import Path
from typing import Any

import torch

from agent_rl.learn.config import LearnerConfig, LossConfig
from agent_rl.learn.distributed import (
    Layout,
    free_port,
    join_process_group,
    layout,
    leave_process_group,
)
from agent_rl.learn.errors import LearnerError
from agent_rl.learn.learner import Learner, UpdateResult
from agent_rl.trajectory import Group

logger = logging.getLogger(__name__)

# How long rank 0, after failing, waits for the other ranks' outcomes. A rank whose failure
# broke rank 0's collective reports at once; a rank still waiting in a collective after this
# long did not fail, so the failure was rank 0's own.
REPORT_WAIT_S = 10.0
RANK_NAME = "learner-rank"
WATCH_INTERVAL_S = 0.5  # how often the watch over the ranks checks that rank 0 is still busy


class RankFailed(RuntimeError):
    """A rank 1..N-1 raised; the message is its traceback."""


class LearnerRank:
    """Rank `rank` (1..N-1) as a Ray actor: joins rank 0's process group, builds the same
    learner and runs the calls rank 0 makes on its own."""

    def __init__(self, rank: int, ranks: Layout, address: str, port: int,
                 learner_args: tuple[Path, LearnerConfig, LossConfig | None],
                 learner_options: dict[str, Any]) -> None:
        config = learner_args[1]
        if config.threads:
            torch.set_num_threads(config.threads)
        self.rank = rank
        join_process_group(rank, ranks, address, port)
        self.learner = Learner(*learner_args, **learner_options)

    def ready(self) -> int:
        """Returns (with this process's id) once the constructor has run."""
        return os.getpid()

    def call(self, method: str, argument: Any) -> None:
        """Run the learner's `method` as rank 0 runs its own; a failure goes back with its
        traceback (rank 0 then kills this actor, see `DataParallelLearner._watch_ranks`)."""
        try:
            getattr(self.learner, method)(argument)
        except BaseException as error:
            raise RankFailed(f"learner rank {self.rank}: {traceback.format_exc()}") from error


class DataParallelLearner:
    """The learner's interface (`version`, `train_step`, the state and weights) over
    `config.world_size` ranks; `close()` stops the other ranks."""

    def __init__(
        self,
        model_dir: Path,
        config: LearnerConfig,
        loss: LossConfig | None = None,
        *,
        resources: dict[str, float] | None = None,
        **learner_options: Any,
    ) -> None:
        import ray

        self.layout: Layout = layout(config.world_size, config.device)
        self.config = config
        self.resources = resources or {}
        self.restarts = 0  # rank restarts so far, bounded by config.max_rank_restarts
        self._learner_args = (model_dir, config, loss)
        self._learner_options = learner_options
        self._ranks: list[Any] = []
        self._generation = 0  # a fresh set of actor names per start
        self._stopped: str | None = None  # why the ranks are gone, once they are
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # No pipeline started Ray: a local one, a CPU for each rank after rank 0.
            ray.init(num_cpus=config.world_size - 1, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
        try:
            self._start_ranks()
            self.rank0 = Learner(model_dir, config, loss, **learner_options)
            self._wait_until_ready()
        except BaseException:
            self.close()
            raise
        logger.info(self.layout.describe())

    @property
    def version(self) -> int:
        return self.rank0.version

    def train_step(self, groups: list[Group]) -> UpdateResult:
        """One optimizer update on `groups`, every rank training its share; after a rank 1..N-1
        fails, again on restarted ranks (up to `max_rank_restarts` over the learner's life)."""
        while True:
            done, result = self._on_every_rank("train_step", groups)
            if done:
                return result

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give every rank the same full state (a checkpoint of any world size)."""
        done = False
        while not done:
            done, _ = self._on_every_rank("load_state_dict", state)

    def state_dict(self) -> dict[str, Any]:
        """The full state, rank 0's: it is every rank's."""
        return self.rank0.state_dict()

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        return self.rank0.rollout_state_dict()

    def token_logprobs(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        return self.rank0.token_logprobs(token_ids)

    def rank_actors(self) -> list[Any]:
        """The Ray actors of ranks 1..N-1, in rank order (the current ones, after restarts)."""
        return list(self._ranks)

    def close(self) -> None:
        """Stop the other ranks, leave the process group and stop a Ray this learner started;
        safe to call twice."""
        self._stopped = self._stopped or "closed"
        self._stop_ranks()
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> DataParallelLearner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the ranks -----------------------------------------------------------------------------

    def _start_ranks(self) -> None:
        """Create ranks 1..N-1 as Ray actors and join the process group with them as rank 0
        (the actors' constructors join from their side)."""
        import ray

        address, port = ray.util.get_node_ip_address(), free_port()
        remote_class = ray.remote(LearnerRank)
        self._generation += 1
        self._ranks = [
            remote_class.options(
                name=f"{RANK_NAME}-{rank}-{os.getpid()}-{self._generation}",
                # One CPU whatever learner.threads says, as a rollout actor takes at most one:
                # a local Ray counts one per rank, and a rank that asks for more is never placed.
                num_cpus=1,
                num_gpus=1 if self.layout.backend == "nccl" else 0,
                resources=self.resources or None,
                max_restarts=0,  # this learner restarts them, in a new group
            ).remote(rank, self.layout, address, port, self._learner_args,
                     self._learner_options)
            for rank in range(1, self.config.world_size)
        ]
        try:
            join_process_group(0, self.layout, address, port)
        except Exception as error:
            # A rank that failed or was never placed leaves rank 0 to time out: say which.
            raise LearnerError(self._why_ranks_did_not_join()) from error

    def _wait_until_ready(self) -> None:
        import ray

        try:
            ray.get([rank.ready.remote() for rank in self._ranks])
        except ray.exceptions.RayError as error:
            raise LearnerError(f"a learner rank failed while starting: {error}") from error

    def _why_ranks_did_not_join(self) -> str:
        import ray

        ready = [rank.ready.remote() for rank in self._ranks]
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=REPORT_WAIT_S)
        for rank, ref in enumerate(ready, 1):
            if ref not in done:
                return (f"learner rank {rank} did not start in time: no Ray node may have the "
                        f"resources it asks for (1 CPU, "
                        f"{'1 GPU, ' if self.layout.backend == 'nccl' else ''}"
                        f"learner_resources {self.resources}); check `ray status`")
            try:
                ray.get(ref)
            except ray.exceptions.RayError as error:
                return f"learner rank {rank} failed while starting: {error}"
        return "the learner ranks did not join their process group in time"

    def _stop_ranks(self) -> None:
        import ray

        for rank in self._ranks:
            ray.kill(rank, no_restart=True)
        self._ranks = []
        leave_process_group()

    def _on_every_rank(self, method: str, argument: Any) -> tuple[bool, Any]:
        """Run `method` on every rank: (True, rank 0's result) when the call is done, (False,
        None) when a rank 1..N-1 failed before it was and was restarted, so it must be made
        again. If a rank failed only after the last collective, rank 0's call is whole and the
        restarted ranks hold its outcome: done.

        A `LearnerError` (a batch the learner refuses) is raised alike on every rank and goes up
        as it is. A failure of rank 0 alone stops the learner with that error.
        """
        import ray

        if self._stopped is not None:
            raise LearnerError(f"the learner ranks have stopped ({self._stopped}); start a new "
                               "learner, or resume the run from its last checkpoint")
        shared = ray.put(argument)  # once in the object store, whatever the number of ranks
        pending = [rank.call.remote(method, shared) for rank in self._ranks]
        rank0_done = threading.Event()
        watcher = threading.Thread(target=self._watch_ranks, args=(pending, rank0_done),
                                   name="learner-rank-watch", daemon=True)
        watcher.start()
        try:
            result = getattr(self.rank0, method)(argument)
            rank0_error = None
        except LearnerError as error:
            self._stopped = f"after an error: {error}"
            self.close()
            raise
        except Exception as error:
            result, rank0_error = None, error
        finally:
            rank0_done.set()
            watcher.join()
        failures = self._rank_failures(pending, REPORT_WAIT_S if rank0_error else None)
        if not failures:
            if rank0_error is None:
                return True, result
            self._stopped = f"after an error: {rank0_error}"
            self.close()
            raise rank0_error
        self._restart(failures)
        return rank0_error is None, result

    def _watch_ranks(self, pending: list[Any], rank0_done: threading.Event) -> None:
        """While rank 0 runs its part of a call, kill each rank whose part raised, so that rank
        0, blocked in a collective with it, fails at once instead of after the collective
        timeout. (The rank's traceback is in its result already. Destroying the process group
        inside the failed rank does not close its connections while its learner lives.)"""
        import ray

        remaining = list(pending)
        while remaining and not rank0_done.is_set():
            done, remaining = ray.wait(remaining, num_returns=1, timeout=WATCH_INTERVAL_S)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError:
                    ray.kill(self._ranks[pending.index(ref)], no_restart=True)
                except ray.exceptions.RayActorError:
                    pass  # gone already: rank 0's collective fails on its own

    def _rank_failures(self, pending: list[Any], wait_s: float | None) -> list[str]:
        """What went wrong on ranks 1..N-1 in this call: a death or a rank's own traceback.
        `wait_s` None: wait for every rank (rank 0 succeeded, so they all finish)."""
        import ray

        done, _ = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
        failures = []
        for rank, ref in enumerate(pending, 1):
            if ref not in done:
                continue
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as error:
                failures.append(f"learner rank {rank} died ({error.__class__.__name__}: killed, "
                                "out of memory or its node lost?)")
            except ray.exceptions.RayTaskError as error:
                failures.append(str(error.cause) if isinstance(error.cause, RankFailed)
                                else f"learner rank {rank}: {error}")
        return failures

    def _restart(self, failures: list[str]) -> None:
        """New ranks 1..N-1 in a new group, with rank 0's state, or a `LearnerError` when
        `max_rank_restarts` is spent."""
        self.restarts += 1
        if self.restarts > self.config.max_rank_restarts:
            self._stopped = f"after an error: {failures[0].splitlines()[0]}"
            self.close()
            raise LearnerError(f"{failures[0]}\nthe learner ranks failed {self.restarts} times "
                               f"(learner.max_rank_restarts = {self.config.max_rank_restarts})")
        logger.warning("%s; restarting learner ranks 1..%d from rank 0's state at version %d "
                       "(restart %d of at most %d)", failures[0].splitlines()[0],
                       self.config.world_size - 1, self.rank0.version, self.restarts,
                       self.config.max_rank_restarts)
        self._stop_ranks()
        try:
            self._start_ranks()
            self._wait_until_ready()
            self._load_rank0_state()
        except BaseException as error:
            self._stopped = f"after a failed restart: {error}"
            self.close()
            raise

    def _load_rank0_state(self) -> None:
        import ray

        state = ray.put(self.rank0.state_dict())
        ray.get([rank.call.remote("load_state_dict", state) for rank in self._ranks])
