"""The typed config of one training run, loaded from `configs/*.yaml`.

The run config is a tree of the components' own configs: `env:` (which tasks), `rollout:` (how
episodes are sampled, `RolloutConfig`), `engine:` (the vLLM engine, `EngineConfig`), `learner:`
(`LearnerConfig`), `loss:` (`LossConfig`), `pipeline:` (scheduling and Ray) and `faults:`
(`FaultConfig`). Each knob has one name and one default, the component's. What belongs to the
whole run sits at the top: the model, its dtype and kernels, the seed, the output folder. The
few component fields a run fills itself (the rollout's env and seed, the engine's model, dtype
and seed) are refused in a run config with the key to set instead.

An unknown key is an error naming the nearest valid key (see `agent_rl.config`); a key of the
old flat layout is an error naming its new place (`agent-rl config migrate` rewrites a file).
A run writes the fully resolved config next to its outputs as `config.yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_rl.config import StrictModel, load_config
from agent_rl.env_config import EnvConfig
from agent_rl.evaluate.config import EvaluationConfig
from agent_rl.fault_config import ENV_FAULTS, ENV_RAISE, FaultConfig
from agent_rl.learn.config import LearnerConfig, LossConfig
from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig


class PipelineConfig(StrictModel):
    """How rollout and learner are scheduled, on how many actors, for how long."""

    max_lag: int = Field(
        64, ge=0, description="how many updates old a trained token may be; 0: synchronous RL "
        "(sample a batch with the newest weights, train it, load the weights, repeat)",
    )
    weight_sync_every: int = Field(
        1, ge=1,
        description="rollout actors take new weights only after every K-th update, as large "
        "clusters do when a broadcast is expensive: tokens are then sampled up to K - 1 "
        "updates behind the learner (plus queueing), so the lag really reaches max_lag; K - 1 "
        "may not exceed max_lag, and eval_every must be a multiple of K. 1: every update",
    )
    num_updates: int = Field(10, ge=1, description="optimizer updates to run")
    groups_per_update: int = Field(2, ge=1, description="groups the learner takes per update")
    dynamic_sampling: bool = Field(
        False,
        description="fill each update with groups that have reward variance (DAPO); flat "
        "groups are counted and charted but never make an update of their own",
    )
    num_rollout_actors: int = Field(1, ge=1, description="vLLM rollout actors")
    groups_in_flight_per_actor: int = Field(
        2, ge=1, description="concurrent groups per rollout actor"
    )
    max_rollout_errors: int = Field(
        4, ge=0, description="failed rollouts tolerated before stopping"
    )
    stall_timeout_s: float = Field(
        900.0, gt=0, description="stop with an error if no rollout finishes for this long"
    )
    max_actor_restarts: int = Field(
        3, ge=0, description="times Ray restarts a dead rollout actor before the run stops"
    )
    max_wall_s: float | None = Field(
        None, gt=0, description="end the run cleanly after this many seconds; None: no limit"
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to join; None starts a local one"
    )
    ray_num_cpus: int = Field(
        2, ge=1, description="CPUs of a local Ray instance for the rollout actors (each learner "
        "rank after rank 0 adds one)"
    )
    rollout_resources: dict[str, float] = Field(
        default_factory=dict, description="Ray custom resources each rollout actor needs, to "
        "place actors on the nodes that offer them (e.g. {rollout: 1} with `ray start "
        "--resources '{\"rollout\": 1}'` on the rollout nodes); a restarted actor goes to any "
        "node that has them",
    )
    learner_resources: dict[str, float] = Field(
        default_factory=dict, description="Ray custom resources each learner rank after rank 0 "
        "needs (rank 0 is the driver), to place the ranks on the nodes that offer them, as "
        "rollout_resources does for the rollout actors",
    )
    show_worker_logs: bool = Field(
        False, description="print Ray's and vLLM's worker logs here (agent-rl -v sets it); else "
        "they stay in the run dir's worker_logs/",
    )
    eval_every: int = Field(0, ge=0, description="evaluate every N updates; 0: never")
    checkpoint_every: int = Field(
        0, ge=0, description="checkpoint every N updates; 0: at the end only"
    )
    keep_checkpoints: int = Field(2, ge=1, description="newest checkpoints kept on disk")

    @property
    def mode(self) -> Literal["sync", "async"]:
        """A label for reports: synchronous RL is the same pipeline at lag 0."""
        return "sync" if self.max_lag == 0 else "async"

    @model_validator(mode="before")
    @classmethod
    def _mode_is_max_lag(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mode" in data:
            raise ValueError(
                f"pipeline.mode ({data['mode']!r}) is gone: the lag bound says it. For "
                "synchronous RL set pipeline.max_lag: 0; for asynchronous, a positive max_lag "
                "(64 by default). Remove pipeline.mode"
            )
        return data

    @model_validator(mode="after")
    def _weight_sync_within_max_lag(self) -> PipelineConfig:
        every, max_lag = self.weight_sync_every, self.max_lag
        if every - 1 > max_lag:
            raise ValueError(
                f"pipeline.weight_sync_every = {every} leaves the rollout's weights up to "
                f"{every - 1} updates behind, more than pipeline.max_lag = {max_lag} allows: "
                "no token "
                f"sampled just before a sync could be trained; set weight_sync_every <= "
                f"{max_lag + 1} or raise max_lag"
            )
        if self.eval_every and self.eval_every % every:
            raise ValueError(
                f"pipeline.eval_every = {self.eval_every} is not a multiple of "
                f"pipeline.weight_sync_every = {every}: each held-out evaluation runs on the "
                "rollout's weights, which are the reported update's only at a sync"
            )
        return self


# Component fields the run fills from its own top-level keys: setting them in a run config
# would give one knob two places.
RUN_OWNED: dict[str, dict[str, str]] = {
    "rollout": {"env_id": "env.id", "env_kwargs": "env.kwargs", "seed": "seed",
                "env_threads": "pipeline.groups_in_flight_per_actor", "agent": "env.agent",
                "agent_time_limit_s": "env.agent_time_limit_s",
                "agent_history": "env.agent_history"},
    "engine": {"model": "model or init_from", "dtype": "dtype", "seed": "seed",
               "lm_head_fp32": "dtype"},
}

# Where each key of the flat layout (before the config tree) went.
MOVED_KEYS: dict[str, str] = {
    "env_kwargs": "env.kwargs", "tasks_split": "env.split", "task_categories":
    "env.kwargs.categories", "max_tasks": "env.max_tasks", "eval_split": "env.eval_split",
    "eval_tasks": "env.eval_tasks", "max_turns": "env.kwargs.max_turns",
    "sandbox_timeout_s": "env.sandbox_timeout_s",
    "group_size": "rollout.group_size", "temperature": "rollout.temperature",
    "max_new_tokens": "rollout.max_tokens_per_turn",
    "max_model_len": "engine.max_model_len", "kv_cache_gib": "engine.kv_cache_gib",
    "prefix_caching": "engine.enable_prefix_caching", "rollout_cpu_cores": "engine.cpu_cores",
    **{key: f"learner.{key}" for key in (
        "lr", "betas", "weight_decay", "adam_eps", "max_grad_norm", "micro_batch_tokens",
        "activation_checkpointing", "diagnose_flat_groups", "share_prompt")},
    "learner_device": "learner.device", "learner_threads": "learner.threads",
    **{key: f"loss.{key}" for key in ("clip", "is_level", "kl_coef")},
    **{key: f"pipeline.{key}" for key in PipelineConfig.model_fields},
}


class TrainConfig(StrictModel):
    """One RL run: the model, and the configs of its environment, rollout, engine, learner,
    loss, pipeline and injected faults."""

    model: str = Field("tiny", description="'default', 'tiny', or a checkpoint directory")
    init_from: Path | None = Field(
        None, description="start from these weights (an `agent-rl sft` run dir, one of its "
        "checkpoints, or a HF folder) of `model`'s architecture and tokenizer",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="learner and rollout dtype"
    )
    matched_kernels: bool = Field(
        True, description="learner and rollout run kernels.llama (else transformers and vLLM's)"
    )
    seed: int = Field(0, description="seed of task order, sampling and the learner")
    out_dir: Path = Field(Path("runs/run"), description="where metrics, checkpoints and plots go")
    resume: bool = Field(True, description="continue from the newest checkpoint in out_dir")

    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    faults: FaultConfig = Field(
        default_factory=FaultConfig, description="faults injected on purpose (all off by default)"
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_flat_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        moved = [f"{key} -> {MOVED_KEYS[key]}" for key in data if key in MOVED_KEYS]
        if isinstance(data.get("env"), str):
            moved.insert(0, "env -> env.id")
        if moved:
            raise ValueError(
                "the run config is a tree now (env:, rollout:, engine:, learner:, loss:, "
                f"pipeline:); move {', '.join(moved)}, or rewrite the file with "
                "`agent-rl config migrate FILE --in-place`"
            )
        return data

    @model_validator(mode="after")
    def _refuse_run_owned_fields(self) -> TrainConfig:
        for section, owned in RUN_OWNED.items():
            for field in sorted(getattr(self, section).model_fields_set & set(owned)):
                raise ValueError(
                    f"{section}.{field} is set by the run; set {owned[field]} instead"
                )
        rollout = self.rollout
        if rollout.top_p != 1.0 or rollout.top_k != 0 or rollout.min_tokens_per_turn != 0:
            raise ValueError(
                "rollout.top_p, top_k and min_tokens_per_turn must keep their defaults in a "
                "training run: the learner scores tokens under the temperature alone, so any "
                "other sampling change would make the importance weights wrong"
            )
        step_faults = [f"faults.{kind}_every" for kind in ENV_FAULTS
                       if kind != ENV_RAISE and getattr(self.faults, f"{kind}_every")]
        if self.env.agent is not None and step_faults:
            raise ValueError(
                f"{', '.join(step_faults)} act on the env's step, which an episode played by "
                f"env.agent does not have; faults.env_raise_every reaches agent episodes (every "
                "Nth request to the endpoint fails, and its episode ends as an env error)"
            )
        return self


def load_train_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML run config; dotted `overrides` are applied on top ({"pipeline.num_updates": 3})."""
    return load_config(path, TrainConfig, overrides)


def migrate_flat_config(data: dict[str, Any]) -> dict[str, Any]:
    """A config of the flat layout as a tree; keys that did not move keep their place."""
    tree: dict[str, Any] = {}
    for key, value in data.items():
        if key == "env" and isinstance(value, str):
            key = "env.id"
        path = MOVED_KEYS.get(key, key).split(".")
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, dict) and isinstance(node.get(path[-1]), dict):
            node[path[-1]].update(value)
        else:
            node[path[-1]] = value
    order = list(TrainConfig.model_fields)
    return dict(sorted(tree.items(), key=lambda item: (
        order.index(item[0]) if item[0] in order else len(order))))
