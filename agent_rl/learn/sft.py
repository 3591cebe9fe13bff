"""Supervised fine-tuning, the cold start before RL: `agent-rl sft configs/sft.yaml`.

A model that never writes a tool call gets reward 0 on every episode, so RL has no gradient.
SFT first shows it whole episodes of tool use: masked cross-entropy on the assistant's tokens
of demonstrations (`agent_rl.learn.demonstrations`), which are rendered exactly as the rollout renders
episodes. It trains the learner's own model (the matched Llama) with its optimizer, and writes
what an RL run writes: `config.yaml`, `metrics.jsonl`, TensorBoard, and checkpoints, the last
of which holds a Hugging Face export (`hf/`) that `agent-rl eval --model` and `init_from:` load.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from agent_rl.config import StrictModel, dump_config, load_config
from agent_rl.env_config import EnvConfig
from agent_rl.learn.learner import LearnerConfig

__all__ = ["SFTConfig", "SFTSummary", "demonstration_sample", "load_sft_config", "run_sft",
           "sft_step"]

logger = logging.getLogger(__name__)


def _sft_learner() -> LearnerConfig:
    return LearnerConfig(lr=1e-5, max_grad_norm=1.0)


class SFTConfig(StrictModel):
    """One SFT run: the model, where demonstrations come from, the learner, the outputs."""

    model: str = Field("tiny", description="'default', 'tiny', or a checkpoint directory")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="the model's dtype")
    seed: int = Field(0, description="seed of the demonstration order and the model")
    out_dir: Path = Field(Path("runs/sft"), description="where the run's files go")
    resume: bool = Field(True, description="continue from the newest checkpoint in out_dir")
    env: EnvConfig = Field(
        default_factory=EnvConfig,
        description="the env whose oracle plays the demos (its train split only); "
        "env.kwargs.categories picks the categories",
    )
    demos_per_category: int | None = Field(
        None, ge=1, description="oracle demonstrations per category, from the train split"
    )
    oracle: bool = Field(True, description="include the env oracle's demonstrations")
    demonstration_files: list[Path] = Field(
        default_factory=list, description="JSONL files of chat conversations to train on too"
    )
    epochs: float = Field(1.0, gt=0, description="passes over the demonstrations")
    batch_size: int = Field(8, ge=1, description="demonstrations per optimizer step")
    learner: LearnerConfig = Field(
        default_factory=_sft_learner,
        description="the RL learner's config; here lr defaults to 1e-5 and max_grad_norm to 1.0",
    )

    @model_validator(mode="after")
    def _train_split_only(self) -> SFTConfig:
        if self.env.split != "train":
            raise ValueError(f"env.split is {self.env.split!r}: demonstrations come from the "
                             "train split only, so held-out tasks stay unseen")
        return self


@dataclass
class SFTSummary:
    run_dir: Path
    steps: int
    demonstrations: int
    dropped: dict[str, int]
    model_dir: Path
    final_loss: float


def load_sft_config(path: str | Path, overrides: dict[str, Any] | None = None) -> SFTConfig:
    return load_config(path, SFTConfig, overrides)


def demonstration_sample(row: dict[str, Any]) -> Any:
    """A demonstration as a learner `Sample`: its model tokens are the ones scored. Samples of
    one batch share a group, so their common prompt is forwarded once."""
    from agent_rl.learn.learner import Sample

    mask = torch.tensor(row["loss_mask"][1:], dtype=torch.bool)
    positions = mask.nonzero().squeeze(-1)
    return Sample(
        token_ids=torch.tensor(row["token_ids"], dtype=torch.long),
        model_positions=positions,
        behavior_logprobs=torch.zeros(positions.numel(), dtype=torch.float64),
        policy_versions=torch.zeros(positions.numel(), dtype=torch.long),
        advantage=0.0,
        group=0,
    )


def sft_step(learner: Any, rows: list[dict[str, Any]]) -> dict[str, float]:
    """One optimizer step of masked cross-entropy: the mean over the batch's model tokens of
    -log p(token), whatever the micro-batch split."""
    from agent_rl.learn.learner import micro_batches

    start = time.perf_counter()
    samples = [demonstration_sample(row) for row in rows]
    model_tokens = sum(sample.model_positions.numel() for sample in samples)
    learner.zero_grad()
    total = 0.0
    for batch in micro_batches(samples, learner.config.micro_batch_tokens):
        loss = sum(-logprobs.sum() for _, logprobs in learner.sampled_logprobs(batch))
        loss = loss / model_tokens
        loss.backward()
        total += float(loss.detach())
    grad_norm = learner.apply_gradients()
    elapsed = time.perf_counter() - start
    return {
        "losses/sft_loss": total,
        "losses/grad_norm": grad_norm,
        "charts/model_tokens": model_tokens,
        "perf/step_s": elapsed,
        "perf/tokens_per_s": sum(s.num_tokens for s in samples) / elapsed,
    }


def build_demonstrations(config: SFTConfig, model_dir: Path) -> Any:
    """The run's demonstration dataset: saved in the run dir, reused when it is there."""
    from transformers import AutoTokenizer

    from agent_rl.learn.demonstrations import (
        DATASET_DIR,
        Demonstrations,
        chat_file_demonstrations,
        load_demonstrations,
        oracle_demonstrations,
        save_demonstrations,
    )

    saved = Path(config.out_dir) / DATASET_DIR
    if saved.exists():
        return load_demonstrations(saved), {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    demos = Demonstrations()
    if config.oracle:
        kwargs = config.env.make_kwargs("train")
        del kwargs["split"]
        demos = oracle_demonstrations(config.env.id, tokenizer, kwargs,
                                      per_category=config.demos_per_category, seed=config.seed)
    for path in config.demonstration_files:
        demos.rows += chat_file_demonstrations(path, tokenizer).rows
    dataset = demos.to_dataset()
    save_demonstrations(dataset, config.out_dir)
    return dataset, dict(demos.dropped)


def run_sft(
    config: SFTConfig,
    on_step: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> SFTSummary:
    """Build (or reuse) the demonstrations, train, and export the final weights."""
    from agent_rl.learn.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from agent_rl.learn.hf_export import EXPORT_DIR, export_hf_checkpoint
    from agent_rl.learn.learner import Learner, learner_device
    from agent_rl.metrics import MetricsWriter
    from agent_rl.model_store import resolve_model
    from agent_rl.orchestrate.run_state import RunState

    model_dir = resolve_model(config.model, config.dtype)
    learner_device(config.learner.device)
    run_dir = Path(config.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    dataset, dropped = build_demonstrations(config, model_dir)
    rows = dataset.to_list()
    steps_per_epoch = math.ceil(len(rows) / config.batch_size)
    num_steps = max(1, round(config.epochs * steps_per_epoch))

    learner = Learner(model_dir, config.learner, dtype=config.dtype, seed=config.seed)
    checkpoint = latest_checkpoint(run_dir) if config.resume else None
    if checkpoint is not None:
        learner.load_state_dict(load_checkpoint(checkpoint)[0])
    metrics: dict[str, Any] = {}
    with MetricsWriter(run_dir) as writer:
        writer.keep_through(learner.version)
        while learner.version < num_steps:
            batch = _batch(rows, learner.version, config.batch_size, config.seed)
            metrics = sft_step(learner, batch)
            metrics["epoch"] = learner.version / steps_per_epoch
            writer.write(learner.version, metrics)
            if on_step is not None:
                on_step(learner.version, num_steps, metrics)
    final = latest_checkpoint(run_dir)
    if final is None or not (final / EXPORT_DIR / "config.json").exists():
        final = save_checkpoint(run_dir, learner.state_dict(), RunState(), keep=1)
        export_hf_checkpoint(learner.rollout_state_dict(), model_dir, final / EXPORT_DIR)
    return SFTSummary(run_dir=run_dir, steps=learner.version, demonstrations=len(rows),
                      dropped=dropped, model_dir=final / EXPORT_DIR,
                      final_loss=float(metrics.get("losses/sft_loss", float("nan"))))


def _batch(rows: list[dict[str, Any]], step: int, size: int, seed: int) -> list[dict[str, Any]]:
    """The demonstrations of step `step`: epochs are shuffled anew, a function of (seed, step)
    alone, so a resumed run sees the batches it would have seen."""
    per_epoch = math.ceil(len(rows) / size)
    epoch, position = divmod(step, per_epoch)
    order = list(range(len(rows)))
    random.Random(f"{seed}-{epoch}").shuffle(order)
    return [rows[i] for i in order[position * size : (position + 1) * size]]
