"""The rollout actor on a torch.compile'd vLLM engine (`enforce_eager: false`, what
`agent-rl bench rollout --compiled` measures) still records the logprobs its engine computes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_rollout_envs import CounterToolEnv

from agent_rl.rollout.actor import RolloutActor
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig

pytestmark = pytest.mark.slow


async def _worst_logprob_gap(model_dir: Path) -> float:
    envs: list[CounterToolEnv] = []
    actor = RolloutActor(
        EngineConfig(model=str(model_dir), max_model_len=2048, kv_cache_gib=0.5,
                     enforce_eager=False),
        RolloutConfig(max_tokens_per_turn=24, seed=1234, context_budget=2048),
        env_factory=lambda: CounterToolEnv(envs),
    )
    await actor.start()
    try:
        group = await actor.generate_group({"task_id": "compiled", "turns": 2}, 4)
        worst = 0.0
        for trajectory in group.trajectories:
            recomputed = await actor.prompt_logprobs(trajectory.token_ids)
            for i, sampled in enumerate(trajectory.loss_mask):
                if sampled:
                    worst = max(worst, abs(recomputed[i - 1] - trajectory.behavior_logprobs[i]))
        return worst
    finally:
        await actor.shutdown()


def test_compiled_engine_logprobs_match_its_teacher_forced_recompute(tiny_model: Path) -> None:
    assert asyncio.run(_worst_logprob_gap(tiny_model)) <= 1e-5
