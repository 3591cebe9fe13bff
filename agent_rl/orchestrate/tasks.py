"""The run's tasks: the env's own split, in an endless reproducible order."""

from __future__ import annotations

import random
from typing import Any

from agent_rl.train_config import TrainConfig


class TaskStream:
    """An endless, reproducible order of tasks: position i is always the same task.

    Each pass over the task set is a fresh shuffle seeded by (seed, pass), so a resumed run only
    needs the position to continue exactly where it stopped.
    """

    def __init__(self, tasks: list[dict[str, Any]], seed: int) -> None:
        if not tasks:
            raise ValueError(
                "the task set is empty; check env.split, env.kwargs (categories), env.max_tasks"
            )
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


def load_task_rows(config: TrainConfig, split: str) -> list[dict[str, Any]]:
    """The env's own tasks of `split` (`envs.loading`: every env keeps its tasks)."""
    from envs.loading import env_tasks

    kwargs = config.env.make_kwargs(split)
    del kwargs["split"]
    rows = env_tasks(config.env.id, split, **kwargs)
    return rows[: config.env.max_tasks] if config.env.max_tasks else rows
