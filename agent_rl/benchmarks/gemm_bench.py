"""The matched GEMM against the one vLLM's stock CPU model runs (oneDNN).

The GEMM is most of a decode step's work, so this is where the matched rollout's cost at large
batches comes from. Each shape is a Llama layer's projection (or the lm_head) of the given
model config. Both kernels get their weights packed before timing, as in the engine (oneDNN's
handle, the matched weight's per-version pack); they take turns on the same inputs
(`kernels_bench.best_interleaved`) and each reports its best repeat.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import torch
from rich.console import Console
from rich.table import Table

from agent_rl.benchmarks.kernels_bench import best_interleaved
from kernels.llama import LlamaConfig


def projection_shapes(config: LlamaConfig) -> dict[str, tuple[int, int]]:
    """(N, K) of each distinct projection of a layer, and of the lm_head."""
    hidden, kv = config.hidden_size, config.num_kv_heads * config.head_dim
    return {
        "q/o_proj": (config.num_heads * config.head_dim, hidden),
        "k/v_proj": (kv, hidden),
        "gate/up_proj": (config.intermediate_size, hidden),
        "down_proj": (hidden, config.intermediate_size),
        "lm_head": (config.vocab_size, hidden),
    }


def run(console: Console, config: LlamaConfig, rows: list[int], repeats: int = 5,
        flops_per_call: float = 2e8) -> list[dict]:
    """GFLOP/s of the matched `kernels.ops.linear` and of vLLM's oneDNN GEMM, per shape."""
    from vllm import _custom_ops as vllm_ops

    from kernels import ops

    if not vllm_ops._supports_onednn:
        raise RuntimeError("this vLLM build has no oneDNN GEMM to compare with")
    results = []
    for m in rows:
        for name, (n, k) in projection_shapes(config).items():
            x, weight = torch.randn(m, k), torch.randn(n, k)
            handler = vllm_ops.create_onednn_mm(weight.t(), 32)
            ops.linear(x[:1], weight)  # packs the matched weight, as the engine's first step does
            flops = 2 * m * n * k
            calls = max(1, int(flops_per_call / flops))
            rates = best_interleaved({
                "matched": partial(_gflops, partial(ops.linear, x, weight), flops, calls),
                "oneDNN": partial(_gflops, partial(vllm_ops.onednn_mm, handler, x, None), flops,
                                  calls),
            }, repeats)
            results.append({"rows": m, "projection": name, "n": n, "k": k,
                            "matched_gflops": rates["matched"], "onednn_gflops": rates["oneDNN"],
                            "ratio": rates["matched"] / rates["oneDNN"]})
    table = Table(title=f"GEMM, matched vs vLLM's oneDNN ({torch.get_num_threads()} threads)")
    for column in ("rows", "projection", "N x K", "matched GFLOP/s", "oneDNN GFLOP/s", "ratio"):
        table.add_column(column)
    for r in results:
        table.add_row(str(r["rows"]), r["projection"], f"{r['n']} x {r['k']}",
                      f"{r['matched_gflops']:.0f}", f"{r['onednn_gflops']:.0f}", f"{r['ratio']:.2f}")
    console.print(table)
    return results


def _gflops(gemm: Callable[[], object], flops: int, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        gemm()
    return flops * calls / (time.perf_counter() - start) / 1e9
