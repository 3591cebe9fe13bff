"""`agent-rl bench ...`: each benchmark prints its side-by-side table and can save its rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console()
app = typer.Typer(help="Benchmarks that print ratios measured side by side in one run.",
                  no_args_is_help=True)

OutOption = Annotated[Path | None, typer.Option(
    "--out", help="Also write the rows as JSON: a .json file, or a folder (bench_NAME.json in it).")]


def _save(rows: Any, out: Path | None, name: str) -> None:
    if out is None:
        return
    if out.suffix != ".json":
        out = out / f"bench_{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2, default=str))
    console.print(f"rows written to {out}")


@app.command("sandbox")
def bench_sandbox(
    repeats: Annotated[int, typer.Option(min=3)] = 20,
    backend: Annotated[list[str] | None, typer.Option(
        help="A backend to measure (repeatable); default: every one that runs here.")] = None,
    out: OutOption = None,
) -> None:
    """Session start (cold, pooled) and call latency per backend vs a bare `python -c`."""
    from agent_rl.benchmarks import sandbox_bench

    _save(sandbox_bench.run(console, repeats=repeats, backends=backend), out, "sandbox")


@app.command("env")
def bench_env(
    env: Annotated[str, typer.Option(help="A registered env id.")] = "agent_rl/PythonTool-v0",
    steps: Annotated[int, typer.Option(min=1)] = 200,
    out: OutOption = None,
) -> None:
    """Env reset latency and per-step overhead excluding the tool's own work."""
    from agent_rl.benchmarks import env_bench

    _save(env_bench.run(console, env_id=env, steps=steps), out, "env")


@app.command("kernels")
def bench_kernels(
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "default",
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16.")] = "float32",
    batch_size: Annotated[int, typer.Option(min=1)] = 8,
    max_tokens: Annotated[int, typer.Option(min=1)] = 64,
    prompt_tokens: Annotated[int, typer.Option(
        min=0, help="Prompt length in tokens; 0: a short counting prompt.")] = 0,
    group_size: Annotated[int, typer.Option(
        min=1, help="Samples per prompt (n), sharing its cached prefix as an RL group does.")] = 1,
    device: Annotated[str, typer.Option(
        help="cpu: the rollout in vLLM and the learner, at the model's shape. cuda: the Triton "
        "kernels against cuBLAS, flash SDPA and transformers at Llama-3.2-1B shapes.")] = "cpu",
    out: OutOption = None,
) -> None:
    """Rollout tokens/s matched vs vLLM's model; learner fwd+bwd tokens/s matched vs transformers."""
    if device == "cuda":
        _bench_kernels_cuda(out)
        return
    if device != "cpu":
        raise typer.BadParameter(f"--device must be cpu or cuda, got {device!r}")
    from agent_rl.benchmarks import kernels_bench
    from agent_rl.model_store import resolve_model

    rows = kernels_bench.run(console, resolve_model(model, dtype), dtype=dtype,
                             batch_size=batch_size, max_tokens=max_tokens,
                             prompt_tokens=prompt_tokens, group_size=group_size)
    _save(rows, out, "kernels")


def _bench_kernels_cuda(out: Path | None) -> None:
    import torch

    from agent_rl.benchmarks import kernels_cuda_bench

    if not torch.cuda.is_available():
        raise typer.BadParameter("--device cuda needs a CUDA GPU, and torch sees none here; "
                                 "scripts/gpu_check.sh runs this bench on a GPU machine")
    from rich.table import Table

    table = Table("part", "shape", "matched ms", "stock ms", "matched/stock")
    with console.status("timing the matched kernels against stock on the GPU"):
        rows = kernels_cuda_bench.run(lambda row: console.log(
            f"{row['part']}: {row['shape']}: {row['matched_over_stock']:.2f}x"))
    for row in rows:
        table.add_row(row["part"], row["shape"], f"{row['matched_ms']:.3f}",
                      f"{row['stock_ms']:.3f}", f"{row['matched_over_stock']:.2f}x")
    console.print(table)
    _save({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, out,
          "kernels_cuda")


@app.command("gemm")
def bench_gemm(
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "default",
    rows: Annotated[str, typer.Option(
        help="Comma-separated row counts: 96 is a decode step of 12 groups of 8, 3072 their "
        "32-token prefill.")] = "96,3072",
    out: OutOption = None,
) -> None:
    """GFLOP/s of the matched GEMM vs vLLM's oneDNN GEMM at the model's projection shapes."""
    from agent_rl.benchmarks import gemm_bench
    from agent_rl.model_store import resolve_model
    from kernels.llama import LlamaConfig

    config_file = resolve_model(model) / "config.json"
    config = LlamaConfig.from_hf(json.loads(config_file.read_text()))
    counts = [int(r) for r in rows.split(",") if r.strip()]
    if not counts or min(counts) < 1:
        raise typer.BadParameter(f"rows must be positive integers, got {rows!r}")
    _save(gemm_bench.run(console, config, counts), out, "gemm")


@app.command("learner")
def bench_learner(
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "tiny",
    world_size: Annotated[str, typer.Option(
        help="Comma-separated learner world sizes, each trained on the same batches.")] = "1,2",
    updates: Annotated[int, typer.Option(min=1, help="Timed updates (after one warm-up).")] = 3,
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16.")] = "float32",
    threads: Annotated[int, typer.Option(min=1, help="Torch threads per rank.")] = 1,
    out: OutOption = None,
) -> None:
    """Learner update tokens/s at each world size (ranks after rank 0 as actors of a local Ray)."""
    from agent_rl.benchmarks import learner_bench
    from agent_rl.model_store import resolve_model

    sizes = [int(size) for size in world_size.split(",") if size.strip()]
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"world sizes must be positive integers, got {world_size!r}")
    _save(learner_bench.run(console, resolve_model(model, dtype), sizes, updates=updates,
                            dtype=dtype, threads=threads), out, "learner")


@app.command("pipeline")
def bench_pipeline(
    config: Annotated[Path, typer.Option(help="The run config both modes use.")] = Path("configs/smoke.yaml"),
    updates: Annotated[int, typer.Option(min=1)] = 4,
    env_latency: Annotated[list[str] | None, typer.Option(
        help="An env latency profile (repeatable): none, fixed:2.5, lognormal:2.5,1.0 or "
        "trace:FILE.json; each gets an async/sync pair.")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where the runs stay.")] = Path(
        "runs/bench_pipeline"),
    out: OutOption = None,
) -> None:
    """Async (max_lag 64) vs sync training for the same updates: updates/hour ratio, per env
    latency profile."""
    from agent_rl.benchmarks import pipeline_bench
    from envs.latency import parse_latency

    latencies = [None if spec == "none" else spec for spec in env_latency or ["none"]]
    for spec in latencies:
        if spec is not None:
            parse_latency(spec)  # a bad profile fails before any engine starts
    result = pipeline_bench.run(console, config, updates=updates, latencies=latencies,
                                runs_dir=runs_dir)
    _save(result, out, "pipeline")
    profiles = result["profiles"]
    if out is not None and len(profiles) > 1 and any(p["env_latency"] is None for p in profiles):
        png = (out if out.suffix == ".json" else out / "bench_pipeline.json").with_suffix(".png")
        console.print(f"plot written to {pipeline_bench.plot_ratio_vs_share(profiles, png)}")


@app.command("pipeline-plot")
def bench_pipeline_plot(
    files: Annotated[list[Path], typer.Argument(help="`bench pipeline --out` JSON files; one "
                                                "needs the latency-free profile.")],
    out: Annotated[Path, typer.Option(help="The PNG to write.")] = Path(
        "docs/figures/bench_pipeline_latency.png"),
    json_out: Annotated[Path | None, typer.Option(
        help="Also write every profile plotted, with its latency share, to one JSON file.")] = None,
) -> None:
    """async/sync against the share of a sync update spent waiting on envs, from earlier
    `bench pipeline` runs (profiles of several files together)."""
    from agent_rl.benchmarks import pipeline_bench

    profiles = []
    for path in files:
        if not path.is_file():
            raise typer.BadParameter(f"{path} does not exist")
        profiles += json.loads(path.read_text())["profiles"]
    try:
        written = pipeline_bench.plot_ratio_vs_share(profiles, out)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    baseline = next(p for p in profiles if p["env_latency"] is None)
    for profile in profiles:
        profile["latency_share"] = pipeline_bench.latency_share(profile, baseline)
        console.print(f"{profile['env_latency'] or 'none'}: async / sync "
                      f"{profile['async_over_sync']:.2f}x at latency share "
                      f"{profile['latency_share']:.0%}")
    console.print(f"plot written to {written}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"sources": [str(path) for path in files],
                                        "profiles": profiles}, indent=2) + "\n")
        console.print(f"profiles written to {json_out}")


@app.command("agent-endpoint")
def bench_agent_endpoint(
    model: Annotated[str, typer.Option(help="'default', 'tiny', a checkpoint dir or a run dir.")] = "default",
    episodes: Annotated[int, typer.Option(min=1, max=40, help="Episodes in flight.")] = 32,
    runs: Annotated[int, typer.Option(min=1, help="Timed rounds per mode.")] = 3,
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16.")] = "float32",
    out: OutOption = None,
) -> None:
    """Episodes/s through the OpenAI-compatible endpoint (an `openai` agent) against the env's
    step loop, on one engine, side by side; median ratio."""
    from agent_rl.benchmarks import agent_endpoint_bench

    _save(agent_endpoint_bench.run(console, model, episodes=episodes, runs=runs, dtype=dtype),
          out, "agent_endpoint")


@app.command("rollout")
def bench_rollout(
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "default",
    concurrency: Annotated[str, typer.Option(help="Comma-separated episode counts.")] = "8,32,64",
    max_tokens: Annotated[int, typer.Option(min=1)] = 128,
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16.")] = "float32",
    compiled: Annotated[bool, typer.Option(
        "--compiled", help="Also measure the engine with torch.compile (enforce_eager off)."
    )] = False,
    out: OutOption = None,
) -> None:
    """Rollout actor tokens/s at several concurrencies vs transformers generate; weight update time."""
    from agent_rl.benchmarks import rollout_bench
    from agent_rl.model_store import resolve_model

    counts = tuple(int(part) for part in concurrency.split(","))
    rows = rollout_bench.run(console, resolve_model(model, dtype), concurrency=counts,
                             max_tokens=max_tokens, dtype=dtype, compiled=compiled)
    _save(rows, out, "rollout")
