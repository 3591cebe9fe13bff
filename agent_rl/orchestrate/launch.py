"""From a run config to its parts: the model the run starts from, the learner, the rollout
checkpoint and the Ray rollout actors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agent_rl.config import ConfigError
from agent_rl.learn.data_parallel import DataParallelLearner
from agent_rl.learn.learner import Learner
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
    """Build the env once here, so a misspelled `env.kwargs` key fails before Ray and vLLM start
    instead of inside every rollout actor."""
    from envs.loading import make_env

    make_env(config.env.id, **config.env.make_kwargs(config.env.split)).close()


def check_agent(config: TrainConfig) -> None:
    """Import `env.agent` here, so a wrong name fails before Ray and vLLM start; the rollout
    actors import it again (it must be on their PYTHONPATH too)."""
    if config.env.agent is None:
        return
    from agent_rl.rollout.agents import AgentLoadError, load_agent

    try:
        load_agent(config.env.agent)
    except AgentLoadError as error:
        raise ConfigError(f"env.agent: {error}") from error


def make_learner(config: TrainConfig, model_dir: Path) -> Learner | DataParallelLearner:
    """The run's learner: its own config and the loss, with the run's model, dtype, kernels,
    sampling temperature and seed; `learner.world_size` ranks of it when that is above 1, the
    ranks after rank 0 Ray actors placed by `pipeline.learner_resources`."""
    options: dict[str, Any] = {
        "matched_kernels": config.matched_kernels, "dtype": config.dtype,
        "temperature": config.rollout.temperature, "seed": config.seed,
    }
    if config.learner.world_size == 1:
        return Learner(model_dir, config.learner, config.loss, **options)
    return DataParallelLearner(model_dir, config.learner, config.loss,
                               resources=config.pipeline.learner_resources, **options)


def rollout_model_dir(config: TrainConfig, model_dir: Path, run_dir: Path) -> Path:
    """The checkpoint the rollout engine loads: with matched kernels, the same weights under the
    `MatchedLlamaForCausalLM` architecture so vLLM runs the learner's kernels."""
    if not config.matched_kernels:
        return model_dir
    from kernels.checkpoint import use_matched_architecture

    return use_matched_architecture(model_dir, run_dir / "rollout_model")


def start_rollout_actors(config: TrainConfig, model_dir: Path) -> list[Any]:
    """Create the Ray rollout actors and begin building their engines (returns at once)."""
    from agent_rl.rollout.actor import make_rollout_actor

    engine_config = config.engine.model_copy(update={
        "model": str(model_dir), "dtype": config.dtype, "seed": config.seed,
        "lm_head_fp32": config.dtype == "float32",
    })
    env_kwargs = config.env.make_kwargs(config.env.split)
    env_factory = (
        FaultyEnvFactory(config.env.id, env_kwargs, config.faults)
        if config.faults.env_faults_on
        else None
    )
    pipeline = config.pipeline
    rollout_config = config.rollout.model_copy(update={
        "env_id": config.env.id, "env_kwargs": env_kwargs, "seed": config.seed,
        "env_threads": max(4, config.rollout.group_size * pipeline.groups_in_flight_per_actor),
        "agent": config.env.agent, "agent_time_limit_s": config.env.agent_time_limit_s,
        "agent_history": config.env.agent_history,
    })
    num_cpus = min(1.0, pipeline.ray_num_cpus / pipeline.num_rollout_actors)
    return [
        make_rollout_actor(
            engine_config,
            rollout_config,
            env_factory=env_factory,
            name=f"rollout-{i}-{os.getpid()}",
            num_cpus=num_cpus,
            max_restarts=pipeline.max_actor_restarts,
            resources=pipeline.rollout_resources,
        )
        for i in range(pipeline.num_rollout_actors)
    ]
