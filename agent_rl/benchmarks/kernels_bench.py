"""Cost of the matched kernels: rollout and learner throughput, matched vs default, in one run.

Targets: matched rollout within 10% of vLLM's stock model, matched learner forward+backward
within 20% of transformers. The machine may be shared, so matched and default runs alternate
(both vLLM engines stay alive side by side) and each side reports its best repeat.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from kernels.checkpoint import use_matched_architecture


def run(console: Console, model_dir: str | Path, dtype: str = "float32", batch_size: int = 8,
        max_tokens: int = 64, learner_tokens: int = 256, repeats: int = 3,
        prompt_tokens: int = 0, group_size: int = 1) -> list[dict]:
    """Measure rollout tokens/s (vLLM matched vs stock) and learner fwd+bwd tokens/s
    (MatchedLlama vs transformers), interleaved; print one table with matched/default ratios.

    `prompt_tokens` and `group_size` give the agent shape: `batch_size` prompts of that length,
    each sampled `group_size` times. Prompts are prefilled by the warm-up and then served from
    the prefix cache, so the figure is decode over long contexts, where attention weighs most.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1" if prompt_tokens < 256 else "4")
    from kernels import ops
    from kernels.vllm_plugin import register

    register()
    model_dir = Path(model_dir).resolve()
    backend = ops.backend(torch.zeros(1)).__name__.rsplit(".", 1)[-1]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        matched_dir = use_matched_architecture(model_dir, Path(tmp) / "matched")
        shape = _RolloutShape(batch_size, max_tokens, prompt_tokens, group_size)
        rollout = best_interleaved({
            "default": _rollout_step(model_dir, dtype, shape),
            "matched": _rollout_step(matched_dir, dtype, shape),
        }, repeats)
        rows += [{"part": "rollout", "kernels": name, "tokens_per_s": rate}
                 for name, rate in rollout.items()]
        gc.collect()
    learner = best_interleaved({
        "default": _learner_step("default", model_dir, dtype, learner_tokens),
        "matched": _learner_step("matched", model_dir, dtype, learner_tokens),
    }, repeats)
    rows += [{"part": "learner fwd+bwd", "kernels": name, "tokens_per_s": rate}
             for name, rate in learner.items()]
    prompt = f", {prompt_tokens}-token prompts x {group_size}" if prompt_tokens else ""
    _print_table(console, rows, f"kernels bench ({model_dir.name}, {dtype}, rollout batch "
                 f"{batch_size} x {max_tokens} tokens{prompt}, learner {learner_tokens} tokens, "
                 f"matched CPU backend {backend}, {torch.get_num_threads()} threads)")
    return rows


def _print_table(console: Console, rows: list[dict], title: str) -> None:
    table = Table(title=title)
    for column in ("part", "default tokens/s", "matched tokens/s", "matched / default"):
        table.add_column(column)
    for part in dict.fromkeys(row["part"] for row in rows):
        rates = {row["kernels"]: row["tokens_per_s"] for row in rows if row["part"] == part}
        ratio = rates["matched"] / rates["default"]
        for row in rows:
            if row["part"] == part:
                row["ratio_to_default"] = rates[row["kernels"]] / rates["default"]
        table.add_row(part, f"{rates['default']:.1f}", f"{rates['matched']:.1f}", f"{ratio:.2f}")
    console.print(table)


def best_interleaved(steps: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Best rate (tokens/s, GFLOP/s: higher is better) each step returns; one warm-up each,
    then the steps take turns, so a shared machine's slow spells hit both sides alike."""
    for step in steps.values():
        step()
    best = dict.fromkeys(steps, 0.0)
    for _ in range(repeats):
        for name, step in steps.items():
            best[name] = max(best[name], step())
    return best


@dataclass(frozen=True)
class _RolloutShape:
    batch_size: int
    max_tokens: int
    prompt_tokens: int
    group_size: int


def _rollout_step(path: Path, dtype: str, shape: _RolloutShape) -> Callable[[], float]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(path), dtype=dtype, enforce_eager=True,
              max_model_len=max(1024, shape.prompt_tokens + shape.max_tokens + 16),
              enable_prefix_caching=shape.prompt_tokens > 0,
              logprobs_mode="processed_logprobs", seed=0)
    params = SamplingParams(n=shape.group_size, logprobs=0, temperature=1.0,
                            max_tokens=shape.max_tokens, ignore_eos=True)
    if shape.prompt_tokens:
        prompts = [{"prompt_token_ids": [100 + (7 * i + 13 * j) % 5000
                                         for j in range(shape.prompt_tokens)]}
                   for i in range(shape.batch_size)]
    else:
        prompts = [f"Count from {i} to {i + 50}:" for i in range(shape.batch_size)]

    def step() -> float:
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
        return tokens / (time.perf_counter() - start)

    return step


def _learner_step(kernels: str, model_dir: Path, dtype: str, tokens: int) -> Callable[[], float]:
    ids = torch.randint(0, 1000, (tokens,), generator=torch.Generator().manual_seed(0))
    if kernels == "matched":
        from kernels.llama import MatchedLlama

        model = MatchedLlama.from_pretrained(model_dir, dtype=dtype)
        logprobs = model.token_logprobs
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))

        def logprobs(x: torch.Tensor) -> torch.Tensor:
            logits = model(x[None]).logits[0].float()
            return logits.log_softmax(-1)[:-1].gather(-1, x[1:, None])[:, 0]

    def step() -> float:
        model.zero_grad()
        start = time.perf_counter()
        logprobs(ids).sum().backward()
        return tokens / (time.perf_counter() - start)

    return step
