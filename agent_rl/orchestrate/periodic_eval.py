"""The held-out reward a run charts every `pipeline.eval_every` updates."""

from __future__ import annotations

from typing import Any

from agent_rl.orchestrate.tasks import load_task_rows
from agent_rl.train_config import TrainConfig
from agent_rl.trajectory import END_ENV_ERROR


def held_out_reward(pool: Any, config: TrainConfig) -> dict[str, float]:
    """Mean reward of one episode on each of `eval_tasks` held-out tasks (never trained on).

    The caller has the actors load the current weights first, so the figure belongs to one
    version; each task keeps its seed from one evaluation to the next, and an episode the env
    broke has no verdict, so it is counted apart rather than as a reward of 0.
    """
    env = config.env
    rows = load_task_rows(config, env.eval_split)[: env.eval_tasks]
    episodes = [t for group in pool.run_episodes(rows) for t in group.episode_ends]
    rewards = [t.reward for t in episodes if t.end_reason != END_ENV_ERROR]
    return {
        "eval/reward_mean": sum(rewards) / len(rewards) if rewards else float("nan"),
        "eval/env_errors": len(episodes) - len(rewards),
    }
