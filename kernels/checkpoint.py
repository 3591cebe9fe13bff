"""Switching a Llama checkpoint between vLLM's stock model and the matched one."""

from __future__ import annotations

import json
from pathlib import Path

from kernels.vllm_plugin import ARCHITECTURE


def use_matched_architecture(src_dir: str | Path, dst_dir: str | Path) -> Path:
    """A copy of `src_dir` whose config.json names MatchedLlamaForCausalLM; weights are symlinks.

    vLLM picks the model class from `architectures`, so the rollout then runs the matched
    kernels on exactly the learner's weight files.
    """
    src, dst = Path(src_dir).resolve(), Path(dst_dir)
    config = json.loads((src / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ValueError(f"{src} holds a {config.get('model_type')!r} model; the matched kernels "
                         "implement the Llama family only")
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        target = dst / item.name
        if item.name == "config.json" or target.exists() or target.is_symlink():
            continue
        target.symlink_to(item)
    config["architectures"] = [ARCHITECTURE]
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst
