"""The learner's update throughput at several world sizes, on the same batches, side by side.

Each world size trains the same synthetic updates (groups of responses to one prompt each,
random tokens) after one warm-up update, and reports the tokens it forwarded per second of
`train_step`. Every rank gets `threads` torch threads, so on a machine with fewer cores than
ranks times threads the figure is a correctness and overhead check, not a scaling claim.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from agent_rl.learn.config import LearnerConfig
from agent_rl.learn.data_parallel import DataParallelLearner
from agent_rl.learn.learner import Learner
from agent_rl.trajectory import Group, Trajectory


def synthetic_groups(count: int, group_size: int, prompt_tokens: int, response_tokens: int,
                     seed: int) -> list[Group]:
    """Groups whose rewards vary (so every response trains), behavior logprobs all -1."""
    rng = random.Random(seed)
    groups = []
    for g in range(count):
        prompt = [rng.randrange(5, 2000) for _ in range(prompt_tokens)]
        trajectories = []
        for i in range(group_size):
            token_ids = prompt + [rng.randrange(5, 2000) for _ in range(response_tokens)]
            loss_mask = [0] * prompt_tokens + [1] * response_tokens
            trajectories.append(Trajectory(
                task_id=f"task{g}", group_id=f"g{g}", token_ids=token_ids, loss_mask=loss_mask,
                behavior_logprobs=[-1.0 if m else 0.0 for m in loss_mask],
                policy_versions=[0 if m else -1 for m in loss_mask],
                reward=float(i % 2), num_turns=1, end_reason="terminated",
            ))
        groups.append(Group(f"g{g}", f"task{g}", trajectories))
    return groups


def run(console: Console, model_dir: Path, world_sizes: list[int], *, updates: int = 3,
        groups: int = 4, group_size: int = 4, prompt_tokens: int = 64, response_tokens: int = 64,
        dtype: str = "float32", threads: int = 1) -> list[dict]:
    """Tokens per second of `train_step` at each world size; rows as saved by `--out`."""
    batches = [synthetic_groups(groups, group_size, prompt_tokens, response_tokens, seed)
               for seed in range(updates + 1)]
    torch.set_num_threads(threads)
    rows = []
    for world_size in world_sizes:
        config = LearnerConfig(lr=1e-6, threads=threads, world_size=world_size)
        learner_class = DataParallelLearner if world_size > 1 else Learner
        learner = learner_class(model_dir, config, dtype=dtype)
        try:
            learner.train_step(batches[0])  # warm-up: kernel packs, first allocations
            start, tokens = time.perf_counter(), 0
            for batch in batches[1:]:
                # The versions move with the learner, as a lag-0 run's would.
                for trajectory in (t for group in batch for t in group.trajectories):
                    trajectory.policy_versions = [learner.version if v >= 0 else -1
                                                  for v in trajectory.policy_versions]
                tokens += learner.train_step(batch).tokens
            elapsed = time.perf_counter() - start
        finally:
            learner.close()
        rows.append({"world_size": world_size, "threads_per_rank": threads, "updates": updates,
                     "tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed})
    table = Table(title=f"learner train_step, {groups} groups of {group_size} x "
                        f"({prompt_tokens} + {response_tokens}) tokens, {dtype}, "
                        f"{threads} thread(s) per rank")
    for column in ("world size", "tokens/s", f"vs world size {world_sizes[0]}"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["world_size"]), f"{row['tokens_per_s']:.0f}",
                      f"{row['tokens_per_s'] / rows[0]['tokens_per_s']:.2f}x")
    console.print(table)
    return rows
