"""`learner.world_size` ranks on this machine, driven as one learner.

Rank 0 is a `Learner` in the calling process, so the weights for the rollout and the state for a
checkpoint are at hand with no copy between processes (every rank holds the same full state).
Ranks 1..N-1 are spawned processes that join rank 0's process group and follow its commands: each
`train_step` runs on every rank at once, each on its share of the groups, and the gradients meet
in one all-reduce (`agent_rl.learn.distributed`).

A rank that fails reports its error and exits; the collective rank 0 waits in then fails too, and
the learner stops with that rank's error. It is not restarted on its own: the run ends as with a
single learner's failure, and resumes from the last checkpoint.
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import queue
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing

from agent_rl.learn.config import LearnerConfig, LossConfig
from agent_rl.learn.distributed import Layout, free_port, join_process_group, layout
from agent_rl.learn.errors import LearnerError
from agent_rl.learn.learner import Learner, UpdateResult
from agent_rl.trajectory import Group

logger = logging.getLogger(__name__)

STOP = "stop"
REPORT_WAIT_S = 10.0  # how long rank 0 waits for a failed rank's report before giving up on it
JOIN_WAIT_S = 30.0


class DataParallelLearner:
    """The learner's interface (`version`, `train_step`, the state and weights) over
    `config.world_size` ranks; `close()` stops the other ranks."""

    def __init__(
        self,
        model_dir: Path,
        config: LearnerConfig,
        loss: LossConfig | None = None,
        **learner_options: Any,
    ) -> None:
        self.layout: Layout = layout(config.world_size, config.device)
        context = torch.multiprocessing.get_context("spawn")
        self._errors = context.Queue()
        self._commands: list[Any] = []
        self._ranks: list[Any] = []
        self._stopped: str | None = None  # why the ranks are gone, once they are
        port = free_port()
        for rank in range(1, config.world_size):
            commands = context.Queue()
            process = context.Process(
                target=serve_rank, name=f"learner-rank-{rank}", daemon=True,
                args=(rank, self.layout, port, commands, self._errors,
                      (model_dir, config, loss), learner_options),
            )
            process.start()
            self._commands.append(commands)
            self._ranks.append(process)
        try:
            try:
                join_process_group(0, self.layout, port)
            except dist.DistError as error:
                # A rank that failed before joining leaves rank 0 to time out: say why it failed.
                report = self._rank_report()
                if report is None:
                    raise
                raise LearnerError(report) from error
            self.rank0 = Learner(model_dir, config, loss, **learner_options)
        except BaseException:
            self.close()
            raise
        logger.info(self.layout.describe())

    @property
    def version(self) -> int:
        return self.rank0.version

    def train_step(self, groups: list[Group]) -> UpdateResult:
        """One optimizer update on `groups`, every rank training its share."""
        self._send("train_step", groups)
        return self._on_every_rank(self.rank0.train_step, groups)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give every rank the same full state (a checkpoint of any world size)."""
        self._send("load_state_dict", state)
        self._on_every_rank(self.rank0.load_state_dict, state)

    def state_dict(self) -> dict[str, Any]:
        """The full state, rank 0's: it is every rank's."""
        return self.rank0.state_dict()

    def rollout_state_dict(self) -> dict[str, torch.Tensor]:
        return self.rank0.rollout_state_dict()

    def token_logprobs(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        return self.rank0.token_logprobs(token_ids)

    def close(self) -> None:
        """Stop the other ranks and leave the process group; safe to call twice."""
        self._stopped = self._stopped or "closed"
        for commands, process in zip(self._commands, self._ranks, strict=True):
            if process.is_alive():
                commands.put((STOP, None))
        for process in self._ranks:
            process.join(JOIN_WAIT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._ranks, self._commands = [], []
        if dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> DataParallelLearner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, command: str, argument: Any) -> None:
        if self._stopped is not None:
            raise LearnerError(f"the learner ranks have stopped ({self._stopped}); start a new "
                               "learner, or resume the run from its last checkpoint")
        for commands in self._commands:
            commands.put((command, argument))

    def _on_every_rank(self, method: Any, argument: Any) -> Any:
        """Run rank 0's side of a command. A failure anywhere stops every rank. A `LearnerError`
        (a batch the learner refuses) is raised alike on every rank and goes up as it is; any
        other failure is reported with the error of the rank that failed first, if another
        did (rank 0's collective fails when a peer goes)."""
        try:
            return method(argument)
        except LearnerError as error:
            self._stopped = f"after an error: {error}"
            self.close()
            raise
        except BaseException as error:
            self._stopped = f"after an error: {error}"
            report = self._rank_report()
            for process in self._ranks:
                process.join(0)  # reaps a rank that is gone, so is_alive says so
            dead = [rank for rank, process in enumerate(self._ranks, 1) if not process.is_alive()]
            self.close()
            if report is None and not dead:
                raise
            raise LearnerError(report or f"learner rank {dead[0]} stopped without a report "
                               f"(killed, or out of memory?), and rank 0 failed: {error}"
                               ) from error

    def _rank_report(self) -> str | None:
        """The error a failed rank reported, if one did in time."""
        try:
            rank, text = self._errors.get(timeout=REPORT_WAIT_S)
        except queue.Empty:
            return None
        return f"learner rank {rank} failed:\n{text}"


def serve_rank(rank: int, ranks: Layout, port: int, commands: Any, errors: Any,
               learner_args: tuple[Path, LearnerConfig, LossConfig | None],
               learner_options: dict[str, Any]) -> None:
    """Rank `rank`'s process: join the group, build the same learner, follow rank 0's commands
    until told to stop or rank 0's process is gone."""
    config = learner_args[1]
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        join_process_group(rank, ranks, port)
        learner = Learner(*learner_args, **learner_options)
        parent = multiprocessing.parent_process()
        while parent is None or parent.is_alive():
            try:
                command, argument = commands.get(timeout=1.0)
            except queue.Empty:
                continue
            if command == STOP:
                break
            getattr(learner, command)(argument)
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
