"""From a run config to its parts: the model the run starts from, the learner's settings, the
rollout checkpoint and the Ray rollout actors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agent_rl.learn.learner import LearnerSettings
from agent_rl.learn.loss import LossSettings
from agent_rl.orchestrate.faults import FaultyEnvFactory
from agent_rl.train_config import TrainConfig


def resolve_run_model(config: TrainConfig) -> Path:
    """The checkpoint the run's learner and rollout start from: `model`, or the `init_from`
    weights checked against it."""
    from agent_rl.learn.hf_export import resolve_init_from
    from agent_rl.model_store import resolve_model

    model_dir = resolve_model(config.model, config.dtype)
    if config.init_from is None:
        return model_dir
    return resolve_init_from(config.init_from, model_dir)


def check_env_kwargs(config: TrainConfig) -> None:
    """Build the env once here, so a misspelled `env_kwargs` key fails before Ray and vLLM start
    instead of inside every rollout actor."""
    from envs.loading import make_env

    make_env(config.env, **config.env_kwargs).close()


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
    from agent_rl.rollout.actor import RolloutConfig, make_rollout_actor
    from agent_rl.rollout.engine import EngineConfig

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
        env_id=config.env,
        env_kwargs=env_kwargs,
        env_threads=max(4, config.group_size * config.groups_in_flight_per_actor),
    )
    num_cpus = min(1.0, config.ray_num_cpus / config.num_rollout_actors)
    return [
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
