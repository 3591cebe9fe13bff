"""Cost of the matched kernels: rollout and learner throughput, matched vs default, in one run.

Targets: matched rollout within 10% of vLLM's stock model, matched learner forward+backward
within 20% of transformers.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from kernels.checkpoint import use_matched_architecture


def run(console: Console, model_dir: str | Path, dtype: str = "float32", batch_size: int = 8,
        max_tokens: int = 64, learner_tokens: int = 256, repeats: int = 2) -> list[dict]:
    """Measure rollout tokens/s (vLLM matched vs stock) and learner fwd+bwd tokens/s."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from kernels.vllm_plugin import register

    register()
    model_dir = Path(model_dir).resolve()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        matched_dir = use_matched_architecture(model_dir, Path(tmp) / "matched")
        for kernels, path in (("default", model_dir), ("matched", matched_dir)):
            rate = _rollout_tokens_per_s(path, dtype, batch_size, max_tokens, repeats)
            rows.append({"part": "rollout", "kernels": kernels, "tokens_per_s": rate})
    for kernels in ("default", "matched"):
        rate = _learner_tokens_per_s(kernels, model_dir, dtype, learner_tokens, repeats)
        rows.append({"part": "learner fwd+bwd", "kernels": kernels, "tokens_per_s": rate})
    table = Table(title=f"kernels bench ({model_dir.name}, {dtype}, batch {batch_size})")
    for column in ("part", "kernels", "tokens/s", "matched / default"):
        table.add_column(column)
    for row in rows:
        default = next(r for r in rows if r["part"] == row["part"] and r["kernels"] == "default")
        row["ratio_to_default"] = row["tokens_per_s"] / default["tokens_per_s"]
        table.add_row(row["part"], row["kernels"], f"{row['tokens_per_s']:.1f}",
                      f"{row['ratio_to_default']:.2f}")
    console.print(table)
    return rows


def _rollout_tokens_per_s(path: Path, dtype: str, batch_size: int, max_tokens: int,
                          repeats: int) -> float:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(path), dtype=dtype, enforce_eager=True, max_model_len=1024,
              enable_prefix_caching=False, logprobs_mode="processed_logprobs", seed=0)
    params = SamplingParams(logprobs=0, temperature=1.0, max_tokens=max_tokens, ignore_eos=True)
    prompts = [f"Count from {i} to {i + 50}:" for i in range(batch_size)]
    llm.generate(prompts[:1], SamplingParams(max_tokens=4), use_tqdm=False)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        best = max(best, tokens / (time.perf_counter() - start))
    del llm
    gc.collect()
    return best


def _learner_tokens_per_s(kernels: str, model_dir: Path, dtype: str, tokens: int,
                          repeats: int) -> float:
    ids = torch.randint(0, 1000, (tokens,), generator=torch.Generator().manual_seed(0))
    if kernels == "matched":
        from kernels.llama import MatchedLlama

        model = MatchedLlama.from_pretrained(model_dir, dtype=dtype)
        step = model.token_logprobs
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))

        def step(x: torch.Tensor) -> torch.Tensor:
            logits = model(x[None]).logits[0].float()
            return logits.log_softmax(-1)[:-1].gather(-1, x[1:, None])[:, 0]

    best = 0.0
    for _ in range(repeats):
        model.zero_grad()
        start = time.perf_counter()
        step(ids).sum().backward()
        best = max(best, tokens / (time.perf_counter() - start))
    return best
