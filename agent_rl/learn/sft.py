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
from typing import Any

import torch

from agent_rl.config import dump_config
from agent_rl.learn.sft_config import SFTConfig

logger = logging.getLogger(__name__)


@dataclass
class SFTSummary:
    run_dir: Path
    steps: int
    demonstrations: int
    dropped: dict[str, int]
    model_dir: Path
    final_loss: float


def demonstration_sample(row: dict[str, Any]) -> Any:
    """A demonstration as a learner `Sample`: its model tokens are the ones scored. Samples of
    one batch share a group, so their common prompt is forwarded once."""
    from agent_rl.learn.samples import Sample

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
    from agent_rl.learn.samples import micro_batches

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
        final = save_checkpoint(run_dir, learner.state_dict(), {}, keep=1)
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
