"""Moving weights from the learner to a running rollout engine.

The learner publishes a state dict of its (CPU) weight tensors, under HF parameter names,
through Ray's object store; the actor writes it as a safetensors folder on tmpfs and has the
engine reload from that folder while generation is paused. A folder, not tensors, because
AsyncLLM runs its engine core in a child process and tensors passed to
`collective_rpc("reload_weights", weights_iterator=...)` do not survive that trip in vLLM 0.32
(they arrive as lists: "'list' object has no attribute 'dtype'"); writing and reading a 135M
fp32 checkpoint on tmpfs takes well under a second.

Tied embeddings. A model with `tie_word_embeddings` has one weight for its embedding and its
lm_head, and HF checkpoints (and the learner's state dict) name it once, as the embedding.
vLLM's in-place reload processes every layer apart (`model_loader/reload/layerwise.py`): a layer
that receives no checkpoint weight keeps what `process_weights_after_loading` made of the old
ones, which on the CPU is the lm_head's prepacked GEMM weight. The stock Llama then embeds with
the new weights and projects with the old ones. So the reload names `lm_head.weight` too, as the
embedding, whenever the engine's model ties them: the head reloads and repacks like any other
layer through vLLM's own `load_weights` (a model that shares the tensor, like the matched one,
skips the name). `tests/rollout/test_stock_reload.py` checks the stock engine against the learner
after a reload, so a vLLM release that changes this fails there, not silently in a run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
EMBEDDING = "model.embed_tokens.weight"
TIED_HEAD = "lm_head.weight"


class WeightVersionError(ValueError):
    """A weight update whose version does not move the policy forward."""


@dataclass
class WeightUpdateTiming:
    """Seconds spent in each part of one in-flight weight update."""

    version: int
    write_s: float
    pause_s: float
    load_s: float
    resume_s: float
    total_s: float


def cpu_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of a model's weights under its HF names, ready for `ray.put`."""
    return {name: tensor.detach().to("cpu").clone() for name, tensor in model.state_dict().items()}


def with_tied_head(state_dict: Mapping[str, torch.Tensor], tie_word_embeddings: bool
                   ) -> Mapping[str, torch.Tensor]:
    """`state_dict` as a reload of a tied model needs it: with `lm_head.weight` (the embedding)
    when the model ties them and the dict names only the embedding (see the module docstring)."""
    if not tie_word_embeddings or TIED_HEAD in state_dict or EMBEDDING not in state_dict:
        return state_dict
    return {**state_dict, TIED_HEAD: state_dict[EMBEDDING]}


def ties_embeddings(engine: Any) -> bool:
    """Whether the engine's model shares one weight between its embedding and its lm_head."""
    return bool(getattr(engine.model_config.hf_config, "tie_word_embeddings", False))


def scratch_dir() -> Path:
    """A fresh directory on tmpfs when there is one, so weight files never touch the disk."""
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() else None
    return Path(tempfile.mkdtemp(prefix="agent-rl-weights-", dir=parent))


def write_weights(state_dict: Mapping[str, torch.Tensor], directory: Path) -> Path:
    """Write `state_dict` as one safetensors file that vLLM's loader reads as a checkpoint."""
    from safetensors.torch import save_file

    storages: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach().to("cpu").contiguous()
        # Tied weights (embed_tokens / lm_head) share storage, which safetensors refuses.
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages and tensor.numel() > 0:
            tensor = tensor.clone()
        storages.add(storage)
        tensors[name] = tensor
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / WEIGHTS_FILE
    save_file(tensors, str(path))
    return directory


async def reload_in_flight(engine: Any, version: int, weights_dir: Path) -> tuple[float, ...]:
    """Pause the engine keeping requests and KV cache, reload weights, label them, resume.

    Requests in flight keep their KV cache (computed by the older weights) and continue with the
    new weights; vLLM labels every output token with the weight version of the step that sampled
    it, so the tokens after the resume carry `version`.
    """
    start = time.perf_counter()
    await engine.pause_generation(mode="keep", clear_cache=False)
    paused = time.perf_counter()
    try:
        await engine.collective_rpc("reload_weights", kwargs={"weights_path": str(weights_dir)})
        await engine.update_weight_version(str(version))
    finally:
        loaded = time.perf_counter()
        await engine.resume_generation()
    resumed = time.perf_counter()
    return paused - start, loaded - paused, resumed - loaded


async def update_engine_weights(
    engine: Any, version: int, weights: Mapping[str, torch.Tensor] | str | Path
) -> WeightUpdateTiming:
    """Load `weights` (a state dict, or a checkpoint folder) into a running engine as `version`."""
    start = time.perf_counter()
    owned: Path | None = None
    tied = ties_embeddings(engine)
    if isinstance(weights, str | Path):
        weights_dir = Path(weights)
        files = sorted(weights_dir.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{weights_dir} holds no *.safetensors file to load weights from")
        if tied and TIED_HEAD not in _tensor_names(files):
            weights = _load_tensors(files)  # an HF folder of a tied model: add the head below
    if not isinstance(weights, str | Path):
        owned = scratch_dir()
        weights_dir = write_weights(with_tied_head(weights, tied), owned)
    written = time.perf_counter()
    try:
        pause_s, load_s, resume_s = await reload_in_flight(engine, version, weights_dir)
    finally:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
    timing = WeightUpdateTiming(
        version=version,
        write_s=written - start,
        pause_s=pause_s,
        load_s=load_s,
        resume_s=resume_s,
        total_s=time.perf_counter() - start,
    )
    logger.info("weights v%d loaded in %.3fs", version, timing.total_s)
    return timing


def _tensor_names(files: list[Path]) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            names.update(handle.keys())
    return names


def _load_tensors(files: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        tensors.update(load_file(str(path)))
    return tensors
