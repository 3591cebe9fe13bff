"""The rollout's section of a run config (how episodes are sampled): plain data, so that reading
a config does not import torch or vLLM."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agent_rl.config import StrictModel


class RolloutConfig(StrictModel):
    """How episodes are sampled; recorded with every trajectory."""

    group_size: int = Field(8, gt=0, description="episodes per task (one group)")
    context_budget: int = Field(
        16384, gt=0, description="most tokens in one episode; clamped to the engine's limit"
    )
    max_tokens_per_turn: int = Field(1024, gt=0, description="most tokens in one assistant turn")
    min_tokens_per_turn: int = Field(
        0, ge=0, description="fewest tokens per turn (stop tokens ignored until then)"
    )
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature; 0 is greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    top_k: int = Field(0, ge=0, description="keep the k likeliest tokens; 0 keeps all")
    seed: int | None = Field(None, description="base of per-episode seeds; None: unseeded")
    env_id: str = Field("agent_rl/PythonTool-v0", description="gymnasium id of the environment")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="gymnasium.make kwargs")
    env_threads: int = Field(32, gt=0, description="threads running env.reset/env.step calls")
    agent: str | None = Field(
        None, description="'module:function': an own agent plays the episodes through the "
        "actor's OpenAI-compatible endpoint instead of the env (agent_rl.rollout.agents)",
    )
    agent_time_limit_s: float = Field(
        600.0, gt=0, description="most seconds one agent episode may run"
    )
    agent_history: Literal["refuse", "new_segment"] = Field(
        "refuse", description="an agent request whose history differs from the episode's: "
        "refused, or the start of a new segment recorded as such (agent_rl.rollout.chat_episode)",
    )
    pass_tools_to_template: bool = Field(
        True, description="give the env's tool schemas to the chat template as `tools=`"
    )
