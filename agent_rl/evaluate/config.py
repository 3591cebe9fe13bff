"""The `evaluation:` section of a run config: the held-out protocol a run is judged by.

`agent-rl eval --config RUN_CONFIG` plays it: the run's env (`env.id`, `env.eval_split`, and
the `env.kwargs` that define its tasks: categories, turns), the rollout's tokens per turn, the
run's dtype, and this section's sample count, task subset and concurrency. `make demo`,
`make learning-curve` and the lag-64 experiment evaluate through it, so a protocol lives in one
YAML file, not in flags kept equal by hand. Plain data: reading it imports no model code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from agent_rl.config import StrictModel

if TYPE_CHECKING:
    from agent_rl.train_config import TrainConfig

# env.kwargs that choose which tasks are played and how long an episode may run; the others
# (sandbox knobs, latency profiles) are the training env's own
PROTOCOL_ENV_KWARGS = ("categories", "max_turns", "plain_text_answers")


class EvaluationConfig(StrictModel):
    """How held-out tasks are played to score a model."""

    k: int = Field(1, ge=1, description="samples per task; pass@k is reported (k=1: greedy)")
    limit_per_category: int | None = Field(
        16, ge=1, description="the first N held-out tasks of each category; None: all"
    )
    concurrency: int = Field(64, ge=1, description="episodes in flight at once (whole groups of k)")
    context_budget: int = Field(4096, ge=64, description="most tokens per episode")
    resamples: int = Field(2000, ge=100, description="bootstrap resamples of a comparison's CI")


def eval_options(config: TrainConfig) -> dict[str, Any]:
    """`agent_rl.evaluate.evaluate` keyword arguments that play `config`'s protocol."""
    protocol = config.evaluation
    kwargs = config.env.kwargs
    return {
        "env_id": config.env.id,
        "split": config.env.eval_split,
        "k": protocol.k,
        "limit_per_category": protocol.limit_per_category,
        "max_tokens_per_turn": config.rollout.max_tokens_per_turn,
        "max_turns": kwargs.get("max_turns"),
        "context_budget": protocol.context_budget,
        "max_concurrent_episodes": protocol.concurrency,
        "env_kwargs": {key: kwargs[key] for key in PROTOCOL_ENV_KWARGS
                       if key in kwargs and key != "max_turns"},
        "dtype": config.dtype,
        "seed": 0,
        "agent": config.env.agent,
        "agent_time_limit_s": config.env.agent_time_limit_s,
        "agent_history": config.env.agent_history,
    }
