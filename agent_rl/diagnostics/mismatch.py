"""How far the rollout's logprobs are from the learner's at the same weights (`agent-rl mismatch`).

For each dtype and batch size we sample with vLLM, then recompute the sampled tokens' logprobs
with the learner, twice: with the default kernels (vLLM's stock LlamaForCausalLM against a
transformers forward) and with the matched kernels (MatchedLlamaForCausalLM in vLLM against
kernels.llama.MatchedLlama). With equal weights every difference is kernel mismatch, the part of
the rollout/learner gap that importance sampling cannot correct.
"""

from __future__ import annotations

import gc
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from kernels.checkpoint import use_matched_architecture

logger = logging.getLogger(__name__)

DEFAULT_PROMPTS = [
    "What is 2+3?",
    "Write a Python function that reverses a string.",
    "Explain in two sentences why the sky is blue.",
    "List three prime numbers greater than 100.",
    "Translate 'good morning' into French and Spanish.",
    "What is the capital of Australia? Answer briefly.",
    "Give me a short poem about the sea.",
    "How many minutes are there in a day? Show the arithmetic.",
]
KERNELS = ("default", "matched")

TokenLogprobs = Callable[[torch.Tensor], torch.Tensor]


def run(console: Console, model: str | Path, prompts: list[str] | None = None,
        batch_sizes: tuple[int, ...] = (1, 8, 32), dtypes: tuple[str, ...] = ("float32", "bfloat16"),
        max_tokens: int = 64, out_dir: Path = Path("mismatch")) -> dict:
    """Measure default vs matched kernel mismatch; write mismatch.json and mismatch.png."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from kernels.vllm_plugin import register

    register()
    model_dir = Path(model).resolve()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    matched_dir = use_matched_architecture(model_dir, out_dir / "matched-checkpoint")
    prompts = prompts or DEFAULT_PROMPTS
    rows = []
    for dtype in dtypes:
        for kernels in KERNELS:
            engine_dir = matched_dir if kernels == "matched" else model_dir
            learner = _learner(kernels, model_dir, dtype)
            llm = _engine(engine_dir, dtype, max_tokens)
            for batch_size in batch_sizes:
                batch = [prompts[i % len(prompts)] for i in range(batch_size)]
                behavior, recomputed = _sample_and_recompute(llm, learner, batch, max_tokens)
                row = {"dtype": dtype, "kernels": kernels, "batch_size": batch_size,
                       **mismatch_stats(behavior, recomputed)}
                rows.append(row)
                logger.info("mismatch %s", row)
            del llm, learner
            gc.collect()
    report = {"model": str(model_dir), "max_tokens": max_tokens, "rows": rows}
    (out_dir / "mismatch.json").write_text(json.dumps(report, indent=2))
    _plot(rows, out_dir / "mismatch.png")
    _print(console, rows)
    console.print(f"report: {out_dir / 'mismatch.json'}, plot: {out_dir / 'mismatch.png'}")
    return report


def mismatch_stats(behavior: torch.Tensor, learner: torch.Tensor) -> dict[str, float]:
    """Per-token logprob gap, importance weights w = p_learner / p_behavior, and a KL estimate.

    kl_k3 is the non-negative estimator E_behavior[w - 1 - log w] of KL(behavior || learner).
    """
    diff = (learner.double() - behavior.double())
    weights = diff.exp()
    deviation = (weights - 1).abs()
    return {
        "tokens": int(diff.numel()),
        "logp_diff_max": diff.abs().max().item(),
        "logp_diff_mean": diff.abs().mean().item(),
        "share_bitwise_equal": (diff == 0).double().mean().item(),
        "weight_dev_max": deviation.max().item(),
        "weight_dev_median": deviation.median().item(),
        "weight_max_over_median": (weights.max() / weights.median()).item(),
        "kl_k3": (weights - 1 - diff).mean().item(),
    }


def _engine(model_dir: Path, dtype: str, max_tokens: int):
    from vllm import LLM

    return LLM(model=str(model_dir), dtype=dtype, enforce_eager=True,
               max_model_len=max(512, max_tokens + 256), enable_prefix_caching=False,
               logprobs_mode="processed_logprobs", seed=0)


def _learner(kernels: str, model_dir: Path, dtype: str) -> TokenLogprobs:
    if kernels == "matched":
        from kernels.llama import MatchedLlama

        return MatchedLlama.from_pretrained(model_dir, dtype=dtype).eval().token_logprobs
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()

    def token_logprobs(ids: torch.Tensor) -> torch.Tensor:
        logits = hf(ids[None]).logits[0].float()
        return logits.log_softmax(-1)[:-1].gather(-1, ids[1:, None])[:, 0]

    return token_logprobs


def _sample_and_recompute(llm, learner: TokenLogprobs, prompts: list[str],
                          max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    from vllm import SamplingParams

    params = SamplingParams(logprobs=0, temperature=1.0, max_tokens=max_tokens, seed=0)
    behavior, recomputed = [], []
    for out in llm.generate(prompts, params, use_tqdm=False):
        completion = out.outputs[0]
        ids = torch.tensor([*out.prompt_token_ids, *completion.token_ids])
        behavior.append(torch.tensor([step[token].logprob for step, token in
                                      zip(completion.logprobs, completion.token_ids, strict=True)]))
        with torch.no_grad():
            recomputed.append(learner(ids)[len(out.prompt_token_ids) - 1:])
    return torch.cat(behavior), torch.cat(recomputed)


def _print(console: Console, rows: list[dict]) -> None:
    table = Table(title="rollout vs learner at the same weights")
    for column in ("dtype", "kernels", "batch", "tokens", "max |dlogp|", "mean |dlogp|",
                   "bit-equal", "max |w-1|", "w max/median", "KL"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["dtype"], r["kernels"], str(r["batch_size"]), str(r["tokens"]),
                      f"{r['logp_diff_max']:.3g}", f"{r['logp_diff_mean']:.3g}",
                      f"{r['share_bitwise_equal']:.1%}", f"{r['weight_dev_max']:.3g}",
                      f"{r['weight_max_over_median']:.4g}", f"{r['kl_k3']:.3g}")
    console.print(table)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for dtype in sorted({r["dtype"] for r in rows}):
        for kernels in KERNELS:
            sel = [r for r in rows if r["dtype"] == dtype and r["kernels"] == kernels]
            sizes = [r["batch_size"] for r in sel]
            # A log axis cannot show 0: bit-exact points sit at 1e-12.
            axes[0].plot(sizes, [max(r["logp_diff_max"], 1e-12) for r in sel], marker="o",
                         label=f"{kernels} {dtype}")
            axes[1].plot(sizes, [r["weight_max_over_median"] for r in sel], marker="o",
                         label=f"{kernels} {dtype}")
    axes[0].set(xscale="log", yscale="log", xlabel="batch size",
                ylabel="max |logp learner - logp rollout| (1e-12 = exact)")
    axes[1].set(xscale="log", xlabel="batch size", ylabel="importance weight max / median")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
