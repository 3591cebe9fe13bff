"""Trained weights as a Hugging Face checkpoint folder, and `init_from`: starting a run from one.

An exported folder is the base model's folder (config, tokenizer, chat template) with the
trained weights in `model.safetensors`, so vLLM, transformers and the matched learner all load
it as they load the base. `agent-rl sft` and `agent-rl train` write one into their final
checkpoint (`.../hf/`, `export_run_checkpoint` converts any other checkpoint on first use);
`agent-rl eval --model RUN` and `init_from: RUN` find it there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from agent_rl.errors import UserError

__all__ = ["EXPORT_DIR", "InitFromError", "export_hf_checkpoint", "export_run_checkpoint",
           "resolve_init_from"]

EXPORT_DIR = "hf"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
# Config keys that must agree for a checkpoint to be the same architecture as the run's model.
ARCHITECTURE_KEYS = (
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "vocab_size", "tie_word_embeddings",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class InitFromError(UserError, ValueError):
    """An `init_from` checkpoint that is missing, or not of the run's architecture/tokenizer."""


def export_hf_checkpoint(
    weights: dict[str, torch.Tensor], base_dir: Path, out_dir: Path
) -> Path:
    """Write `weights` (Hugging Face names) as a checkpoint folder beside `base_dir`'s files."""
    from safetensors.torch import save_file

    base_dir, out_dir = Path(base_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in base_dir.iterdir():
        if item.is_file() and item.suffix not in WEIGHT_SUFFIXES and item.name != "agent_rl_manifest.json":
            shutil.copy2(item, out_dir / item.name)
    config = json.loads((base_dir / "config.json").read_text())
    tensors = {name: tensor.detach().cpu().contiguous().clone() for name, tensor in weights.items()}
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)  # the loaders tie it to the embedding themselves
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def export_run_checkpoint(checkpoint: Path, base_dir: Path) -> Path:
    """The Hugging Face folder of a run checkpoint, `checkpoint/hf/`: the one way a trained
    checkpoint becomes loadable by vLLM, transformers and the learner. Runs write it with their
    final checkpoint; for any other it is written from `learner.pt` on first use.

    Raises:
        InitFromError: the learner weights carry names `base_dir`'s checkpoint lacks.
    """
    from safetensors import safe_open

    from kernels.llama import hf_name

    out_dir = Path(checkpoint) / EXPORT_DIR
    if (out_dir / "config.json").exists():
        return out_dir
    learner_file = Path(checkpoint) / "learner.pt"
    state = torch.load(learner_file, map_location="cpu", weights_only=True)
    weights = {hf_name(name): tensor for name, tensor in state.get("model", state).items()}
    expected: set[str] = set()
    for shard in Path(base_dir).glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as handle:
            expected.update(handle.keys())
    unknown = sorted(set(weights) - expected - {"lm_head.weight"})
    if unknown:
        raise InitFromError(
            f"{learner_file} holds weights under names the base model {base_dir} lacks (e.g. "
            f"{unknown[:3]}); was the run trained from another model?"
        )
    return export_hf_checkpoint(weights, base_dir, out_dir)


def resolve_init_from(init_from: str | Path, base_dir: Path) -> Path:
    """The checkpoint folder `init_from` names (a run dir, one of its checkpoints, or a HF
    folder), checked to share `base_dir`'s architecture and tokenizer.

    Raises:
        InitFromError: nothing loadable there, or another architecture or tokenizer.
    """
    from agent_rl.learn.checkpoint import latest_checkpoint

    path = Path(init_from).expanduser()
    if not path.exists():
        raise InitFromError(f"init_from {path} does not exist; give an `agent-rl sft` run dir, "
                            "one of its checkpoints, or a Hugging Face checkpoint folder")
    checkpoint = latest_checkpoint(path)
    candidates = [path / EXPORT_DIR, path]
    if checkpoint is not None:
        candidates.insert(0, checkpoint / EXPORT_DIR)
    folder = next((c for c in candidates if (c / "config.json").exists()), None)
    if folder is None:
        raise InitFromError(
            f"init_from {path} holds no Hugging Face checkpoint (no config.json in it, in "
            f"{EXPORT_DIR}/, or in its latest checkpoint's {EXPORT_DIR}/)"
        )
    ours = json.loads((Path(base_dir) / "config.json").read_text())
    theirs = json.loads((folder / "config.json").read_text())
    differ = [key for key in ARCHITECTURE_KEYS if ours.get(key) != theirs.get(key)]
    if differ:
        key = differ[0]
        raise InitFromError(
            f"init_from {folder} is another architecture than the run's model {base_dir}: "
            f"{key} is {theirs.get(key)!r} there and {ours.get(key)!r} here; set `model` to the "
            "model it was trained from"
        )
    for name in TOKENIZER_FILES:
        mine, other = Path(base_dir) / name, folder / name
        if mine.exists() and (not other.exists() or mine.read_bytes() != other.read_bytes()):
            raise InitFromError(
                f"init_from {folder} has another tokenizer than the run's model {base_dir} "
                f"({name} differs or is missing); token ids would not mean the same text"
            )
    return folder
