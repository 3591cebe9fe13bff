"""Cost of the matched kernels on a CUDA GPU: each part against the stock kernel it replaces,
side by side in one run, at Llama-3.2-1B (and 8B projection) shapes with random bf16 weights.

Parts: the GEMM vs cuBLAS, attention vs flash SDPA, the model's forward and forward+backward vs
transformers (SDPA attention). Ratios are matched throughput over stock throughput (higher is
better; 1.0 is parity). The GEMM candidates are other fixed tile configurations, each checked
for row invariance and timed at the same shapes, so the next tile choice rests on measurements.

Needs only torch, triton and transformers (no vLLM): `scripts/gpu_check.sh` runs it with
`python -m agent_rl.benchmarks.kernels_cuda_bench --out FILE` on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

# Llama-3.2-1B: hidden 2048, MLP 8192, 32 query / 8 KV heads of 64, 16 layers, 128256 tokens.
LLAMA_1B = {"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 64, "max_position_embeddings": 16384, "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": True}
# (name, K, N) of x (rows, K) @ W (N, K).T
GEMM_SHAPES = [("1B qo", 2048, 2048), ("1B kv", 2048, 512), ("1B gate/up", 2048, 8192),
               ("1B down", 8192, 2048), ("8B qo", 4096, 4096), ("8B gate/up", 4096, 14336),
               ("8B down", 14336, 4096)]
GEMM_ROWS = [1, 16, 64, 256, 1024, 4096, 16384]
ATTENTION_LENGTHS = [1024, 4096, 16384]


def milliseconds(fn: Callable[..., object], *args: object, repeats: int = 10) -> float:
    """Median wall time of fn(*args) on the GPU (CUDA events), after two warm-up calls."""
    for _ in range(2):
        fn(*args)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _row(part: str, shape: str, matched_ms: float, stock_ms: float, **extra: object) -> dict:
    return {"part": part, "shape": shape, "matched_ms": round(matched_ms, 4),
            "stock_ms": round(stock_ms, 4), "matched_over_stock": round(stock_ms / matched_ms, 3),
            **extra}


def bench_gemm(report: Callable[[dict], None]) -> None:
    from kernels import triton_ops

    for name, k, n in GEMM_SHAPES:
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for m in GEMM_ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            matched = milliseconds(triton_ops.linear, x, weight)
            stock = milliseconds(torch.matmul, x, weight.T)
            report(_row("gemm", f"{name} K={k} N={n} rows={m}", matched, stock,
                        matched_tflops=round(2 * m * k * n / matched / 1e9, 1)))


GEMM_CANDIDATES = {
    "bf16 64x64x64 w4 s3": (torch.bfloat16, 64, 64, 64, 4, 3),
    "bf16 128x128x64 w8 s4": (torch.bfloat16, 128, 128, 64, 8, 4),
    "bf16 128x256x64 w8 s3": (torch.bfloat16, 128, 256, 64, 8, 3),
    "bf16 128x128x64 w4 s3": (torch.bfloat16, 128, 128, 64, 4, 3),
    "fp32 128x128x32 w8 s3": (torch.float32, 128, 128, 32, 8, 3),
    "fp32 128x64x32 w4 s3": (torch.float32, 128, 64, 32, 4, 3),
    "fp32 64x128x32 w4 s4": (torch.float32, 64, 128, 32, 4, 4),
}
# The fp32 tiles are for the vocabulary projection (hidden 2048 -> 128256 tokens).
LM_HEAD_SHAPE = ("1B lm_head", 2048, 128256)


def bench_gemm_candidates(report: Callable[[dict], None]) -> None:
    """Other fixed tiles: row invariance checked at K = 2048 and 8192, then timed (bf16 at the
    projection shapes, fp32 at the vocabulary projection, stock fp32 without TF32)."""
    from kernels import triton_ops

    torch.backends.cuda.matmul.allow_tf32 = False
    for label, (dtype, bm, bn, bk, warps, stages) in GEMM_CANDIDATES.items():
        tiles = triton_ops.MatmulTiles(bm, bn, bk, warps, stages)
        invariant = all(_rows_invariant(tiles, k, dtype) for k in (2048, 8192))
        shapes = GEMM_SHAPES if dtype == torch.bfloat16 else [LM_HEAD_SHAPE]
        for name, k, n in shapes:
            weight = torch.randn(n, k, device="cuda", dtype=dtype)
            for m in (64, 1024, 16384):
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                matched = milliseconds(triton_ops.linear, x, weight, tiles)
                stock = milliseconds(torch.matmul, x, weight.T)
                report(_row(f"gemm candidate {label}", f"{name} K={k} N={n} rows={m}", matched,
                            stock, row_invariant=invariant))


def _rows_invariant(tiles: object, k: int, dtype: torch.dtype) -> bool:
    """Whether rows of a 4096-row product keep their bits in smaller batches, with these tiles."""
    from kernels import triton_ops

    weight = torch.randn(1024, k, device="cuda", dtype=dtype)
    rows = torch.randn(4096, k, device="cuda", dtype=dtype)
    full = triton_ops.linear(rows, weight, tiles)
    generator = torch.Generator().manual_seed(0)
    for m in (1, 7, 64, 65, 300, 2049):
        pick = torch.randperm(4096, generator=generator)[:m].cuda()
        if not torch.equal(triton_ops.linear(rows[pick], weight, tiles), full[pick]):
            return False
    return True


def bench_attention(report: Callable[[dict], None]) -> None:
    from kernels import triton_ops

    heads, kv_heads, dim = 32, 8, 64
    for length in ATTENTION_LENGTHS:
        q = torch.randn(length, heads, dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(length, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        matched = milliseconds(triton_ops.attention, q, k, v, dim ** -0.5)
        # Flash SDPA's layout (batch, heads, T, D), KV heads repeated outside the timing.
        group = heads // kv_heads
        stock_q, stock_k, stock_v = (t.repeat_interleave(r, dim=1).transpose(0, 1)[None]
                                     for t, r in ((q, 1), (k, group), (v, group)))
        stock = milliseconds(_flash_sdpa, stock_q, stock_k, stock_v)
        report(_row("attention", f"{length} tokens, {heads}/{kv_heads} heads, D={dim}",
                    matched, stock))


def _flash_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    """transformers' Llama and the matched one with the same random bf16 weights."""
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers import LlamaForCausalLM

    from kernels.llama import LlamaConfig, MatchedLlama

    torch.manual_seed(0)
    hf_config = HFLlamaConfig(**LLAMA_1B, attn_implementation="sdpa")
    with torch.device("cuda"):
        stock = LlamaForCausalLM(hf_config).to(torch.bfloat16)
        matched = MatchedLlama(LlamaConfig.from_hf(LLAMA_1B)).to(torch.bfloat16)
    matched.load_weights(stock.state_dict().items())
    return stock, matched


def _stock_logprobs(stock: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The stock equivalent of the matched output: bf16 model, fp32 lm_head and log-softmax."""
    hidden = stock.model(input_ids=ids).last_hidden_state[:, :-1]
    logits = hidden.float() @ stock.lm_head.weight.float().T
    return logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _matched_hidden(matched: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The matched model's hidden states of a (batch, length) block as one packed stream."""
    from kernels import ops

    batch, length = ids.shape
    positions = torch.arange(length, device=ids.device).repeat(batch)
    scale = LLAMA_1B["head_dim"] ** -0.5

    def attend(_layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ops.packed_attention(q, k, v, [length] * batch, scale)

    return matched.hidden_states(ids.reshape(-1), positions, attend)


def _train_step(model: torch.nn.Module, logprobs: Callable[[], torch.Tensor]) -> None:
    logprobs().sum().backward()
    model.zero_grad(set_to_none=True)


def bench_model(report: Callable[[dict], None]) -> None:
    stock, matched = _models()
    torch.backends.cuda.matmul.allow_tf32 = False  # the matched fp32 lm_head is IEEE fp32 too
    for batch, length in ((16, 1024), (64, 256)):
        ids = torch.randint(0, LLAMA_1B["vocab_size"], (batch, length), device="cuda")
        shape = f"Llama-3.2-1B {batch} x {length}"
        with torch.no_grad():
            report(_row("model forward", shape,
                        milliseconds(matched.packed_token_logprobs, list(ids), repeats=5),
                        milliseconds(_stock_logprobs, stock, ids, repeats=5)))
            report(_row("model forward, hidden states only", shape,
                        milliseconds(_matched_hidden, matched, ids, repeats=5),
                        milliseconds(stock.model, ids, repeats=5)))
    ids = torch.randint(0, LLAMA_1B["vocab_size"], (4, 1024), device="cuda")

    def matched_logprobs() -> torch.Tensor:
        return torch.cat(matched.packed_token_logprobs(list(ids)))

    def stock_logprobs() -> torch.Tensor:
        return _stock_logprobs(stock, ids)

    report(_row("model forward+backward", "Llama-3.2-1B 4 x 1024",
                milliseconds(_train_step, matched, matched_logprobs, repeats=5),
                milliseconds(_train_step, stock, stock_logprobs, repeats=5)))


def run(report: Callable[[dict], None] = print, candidates: bool = True) -> list[dict]:
    """Every part, each row reported as it is measured; returns all rows."""
    if not torch.cuda.is_available():
        raise RuntimeError("the CUDA kernel bench needs a CUDA GPU; `agent-rl bench kernels` "
                           "without --device cuda measures the CPU kernels")
    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        report(row)

    bench_gemm(keep)
    bench_attention(keep)
    bench_model(keep)
    if candidates:
        bench_gemm_candidates(keep)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    parser.add_argument("--no-candidates", action="store_true", help="skip the GEMM tile sweep")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = run(lambda row: print(json.dumps(row), flush=True), not args.no_candidates)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                        "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
