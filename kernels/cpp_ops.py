"""Compiled batch-invariant CPU kernels (`kernels/csrc/matched_ops.cpp`), same API as `cpu_ops`.

The C++ kernels are invariant by construction: one thread computes each output element in a
fixed order (see the source's header), so they need none of the torch backend's GEMM tiling or
elementwise exp tricks and run much faster. The extension is compiled on first use with
`torch.utils.cpp_extension` and cached under `TORCH_EXTENSIONS_DIR`, else
`$AGENT_RL_HOME/torch_extensions` (default `~/.cache/agent-rl/torch_extensions`). When it cannot
be built, `kernels.ops` falls back to the pure-torch `cpu_ops` and logs why, once. It is built for
one x86-64 level, the best this CPU's flags allow (`kernels.isa`): AVX-512, AVX2 + FMA, or the
baseline. GCC's own clone dispatch (target_clones) picked the baseline on an AMD EPYC with AVX2,
30x slower. `AGENT_RL_KERNELS_ISA` forces a level, so that tests can compare the levels' bits.

Rotary embeddings and log-softmax stay in torch: both are exact elementwise or row-wise
library ops already (see `cpu_ops`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from kernels import cpu_ops, isa
from kernels.cpu_ops import PagedPlan, exp, plan_paged, rotary, rotary_tables

__all__ = ["PagedPlan", "attention", "available", "exp", "forget_packed_weights", "linear",
           "lm_head_logits", "log_softmax", "packed_attention", "packed_weight", "paged_attention",
           "plan_paged", "rms_norm", "rotary", "rotary_tables", "silu_and_mul", "unavailable_reason",
           "write_paged_kv"]

logger = logging.getLogger(__name__)

EXTENSION_NAME = "agent_rl_matched_ops"
SOURCES = [Path(__file__).parent / "csrc" / "matched_ops.cpp"]
# -O2 and exact IEEE semantics: no implicit FMA contraction (the source writes its fused
# multiply-adds), no reassociation; -march is the level's (x86-64-v4, -v3 or the baseline), so
# the vector width is that of the CPU it runs on, and every level gives the same bits.
CFLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-fopenmp", "-Wno-psabi"]
_FLOAT_TYPES = (torch.float32, torch.bfloat16)
_PACKED = "_agent_rl_packed"  # the attribute a weight keeps its packed copy in
_pack_epoch = 0  # moved by forget_packed_weights; part of every pack's key

_lock = threading.Lock()
_state: dict[str, str | bool | None] = {"loaded": None, "reason": None}


def _level_suffix() -> tuple[str, list[str]]:
    """The extension name's suffix and the flags that build it for one x86-64 level: the one
    AGENT_RL_KERNELS_ISA forces, else the best this CPU's flags allow (each level is built and
    cached apart). Without a known level (another architecture) the source builds as clones."""
    level = isa.dispatched_level()
    if level is None:
        return "", []
    token = level.replace("-", "_").upper()
    return f"_{token.lower()}", [f"-DMATCHED_ISA_{token}", f"-march={level}"]


def build_directory() -> Path:
    """Where the compiled extension is cached (kernels/ does not import agent_rl)."""
    if env := os.environ.get("TORCH_EXTENSIONS_DIR"):
        root = Path(env)
    elif env := os.environ.get("AGENT_RL_HOME"):
        root = Path(env).expanduser() / "torch_extensions"
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(cache) / "agent-rl" / "torch_extensions"
    name = EXTENSION_NAME + _level_suffix()[0]
    path = root / f"{name}_torch{torch.__version__.replace('+', '_')}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def available() -> bool:
    """Compile (first call) and load the extension; False, with the reason logged, if it fails.

    `AGENT_RL_KERNELS=torch` skips the extension and selects the pure-torch kernels.
    """
    if _state["loaded"] is not None:
        return bool(_state["loaded"])
    with _lock:
        if _state["loaded"] is None:
            _state["reason"] = _load()
            _state["loaded"] = _state["reason"] is None
            if _state["reason"]:
                logger.warning("compiled matched kernels unavailable, using the pure-torch "
                               "ones: %s", _state["reason"])
    return bool(_state["loaded"])


def unavailable_reason() -> str | None:
    """Why `available()` is False (None when it is True or has not been asked yet)."""
    return _state["reason"]  # type: ignore[return-value]


def _load() -> str | None:
    if os.environ.get("AGENT_RL_KERNELS", "").lower() == "torch":
        return "AGENT_RL_KERNELS=torch selects the pure-torch kernels"
    if hasattr(torch.ops, "agent_rl_matched") and hasattr(torch.ops.agent_rl_matched, "linear"):
        return None
    try:
        suffix, defines = _level_suffix()
    except isa.IsaError as error:
        return str(error)
    try:
        from torch.utils.cpp_extension import load

        load(name=EXTENSION_NAME + suffix, sources=[str(s) for s in SOURCES],
             extra_cflags=CFLAGS + defines,
             extra_ldflags=["-fopenmp"], build_directory=str(build_directory()),
             is_python_module=False, verbose=False)
    except Exception as error:  # a compiler error, a missing toolchain, an unwritable cache
        return f"building {SOURCES[0].name} failed ({type(error).__name__}: {error})"[:2000]
    return None


def _ops():
    return torch.ops.agent_rl_matched


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T; each entry one chain of fused multiply-adds over k, in order."""
    if x.dtype not in _FLOAT_TYPES or weight.dtype not in _FLOAT_TYPES or (
            x.dtype == torch.bfloat16 and weight.dtype != torch.bfloat16):
        return cpu_ops.linear(x, weight)
    return _ops().linear(x, packed_weight(weight), weight.shape[0])


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight in the GEMM's panel layout (panels, K, 64), packed once per weight version.

    Packing reads and writes the whole weight, as much memory traffic as a decode step's GEMM
    itself, so it is kept on the weight. Rollout weights change only by in-place loads and
    learner weights by in-place optimizer steps, which bump the version counter, so a changed
    weight is repacked on its next use. A write through `.data` (vLLM's weight loaders) leaves
    the counter alone: whoever writes so calls `forget_packed_weights`. Inference tensors have
    no version counter, and a weight nothing can attach the pack to is packed on every call.
    """
    if weight.is_inference():
        return _ops().pack_linear_weight(weight)
    key = (_pack_epoch, weight.data_ptr(), weight._version, weight.dtype, weight.shape)
    cached = getattr(weight, _PACKED, None)
    if cached is not None and cached[0] == key:
        return cached[1]
    packed = _ops().pack_linear_weight(weight.detach())
    try:
        setattr(weight, _PACKED, (key, packed))
    except AttributeError:
        pass
    return packed


def forget_packed_weights() -> None:
    """Repack every weight on its next use: after weights were written where the version
    counter does not see it (a copy into `.data`)."""
    global _pack_epoch
    _pack_epoch += 1


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm: fp32 statistics, normalised row rounded to x's dtype, times weight."""
    if x.dtype != weight.dtype or x.dtype not in _FLOAT_TYPES:
        return cpu_ops.rms_norm(x, weight, eps)
    return _ops().rms_norm(x, weight, eps)


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, silu in fp32 rounded to the input dtype."""
    if gate.dtype != up.dtype or gate.dtype not in _FLOAT_TYPES:
        return cpu_ops.silu_and_mul(gate, up)
    return _ops().silu_and_mul(gate, up)


def lm_head_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The vocabulary projection in fp32; a bf16 weight is widened inside the kernel (exactly)."""
    return linear(hidden.float(), weight)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax exactly as vLLM's sampler computes it (torch's row-wise kernel)."""
    return cpu_ops.log_softmax(logits)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal self-attention of one contiguous sequence; q (T, heads, D), k/v (T, kv_heads, D)."""
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _FLOAT_TYPES:
        return cpu_ops.attention(q, k, v, scale)
    return _ops().attention(q, k, v, scale)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Sequence[int],
                     scale: float) -> torch.Tensor:
    """`attention` of each of several sequences packed back to back in one stream."""
    return cpu_ops.attend_each(attention, q, k, v, lengths, scale)


def _compiled_cache(kv_cache: torch.Tensor) -> bool:
    """Whether this cache is in the compiled kernels' block layout (keys stored transposed) rather
    than `cpu_ops`' (keys as rows). Writer and reader ask the same question, so they agree."""
    return kv_cache.dtype in _FLOAT_TYPES and kv_cache.is_contiguous() and kv_cache.dim() == 5


def write_paged_kv(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Store new keys/values at their slots; each block holds a head's keys transposed."""
    if _compiled_cache(kv_cache):
        _ops().write_paged_kv(kv_cache, k, v, slot_mapping)
    else:
        cpu_ops.write_paged_kv(kv_cache, k, v, slot_mapping)


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, plan: PagedPlan,
                    scale: float) -> torch.Tensor:
    """Causal attention of packed queries over a paged cache (blocks, 2, kv_heads, bs, D)
    written by `write_paged_kv`."""
    if not _compiled_cache(kv_cache):
        return cpu_ops.paged_attention(q, kv_cache, plan, scale)
    out = _ops().paged_attention(q.to(kv_cache.dtype), kv_cache, plan.query_start_loc,
                                 plan.seq_lens, plan.positions, plan.block_table, scale)
    return out.to(q.dtype)
