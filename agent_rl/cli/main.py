"""The `agent-rl` command.

The CLI owns printing: library code raises specific exceptions, and `main` turns the ones a user
can fix into a single red line and exit code 2. Heavy imports (vLLM, torch, Ray) happen inside
the commands so that `agent-rl --help` stays instant.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from agent_rl.cli.bench import app as bench_app
from agent_rl.errors import UserError

if TYPE_CHECKING:
    from rich.progress import Progress

    from agent_rl.train_config import TrainConfig

console = Console()
app = typer.Typer(
    help="Asynchronous RL for multi-turn tool-using LLM agents, with matched kernels.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
model_app = typer.Typer(help="Prepare and inspect model checkpoints.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(bench_app, name="bench")


_VERBOSE = [False]  # set by the -v root option, read by the commands that start workers


def is_user_error(error: BaseException) -> bool:
    """Whether `error`'s message alone tells the user what to do (each package's error base;
    these modules are light, so checking imports nothing heavy)."""
    import gymnasium.error

    from envs.errors import EnvsError
    from kernels.errors import KernelsError
    from sandbox.errors import SandboxError

    bases = (UserError, EnvsError, KernelsError, SandboxError, gymnasium.error.Error,
             FileNotFoundError)
    return isinstance(error, bases)


def _register_optional_commands() -> None:
    """Attach command groups whose modules live beside the parts they drive."""
    from agent_rl.cli import config as config_commands
    from agent_rl.cli import desktop as desktop_commands
    from agent_rl.cli import envs as env_commands
    from agent_rl.cli import experiment as experiment_commands
    from agent_rl.cli import sandbox as sandbox_commands
    from agent_rl.cli.eval import compare_command, eval_command
    from agent_rl.cli.simulate import simulate_command

    app.add_typer(env_commands.app, name="env", help="List registered envs and run episodes.")
    app.add_typer(sandbox_commands.app, name="sandbox", help="The sandbox's Docker image.")
    app.add_typer(config_commands.app, name="config", help="Check and migrate run configs.")
    app.add_typer(desktop_commands.app, name="desktop",
                  help="The desktop env's file cache, OSWorld coverage and apps.")
    app.add_typer(experiment_commands.app, name="experiment",
                  help="The project's experiments (lag64: matched vs stock kernels at lag 64).")
    app.command("eval")(eval_command)
    app.command("compare")(compare_command)
    app.command("simulate")(simulate_command)


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log at INFO, and show Ray's and vLLM's worker logs.")] = False,
) -> None:
    _VERBOSE[0] = verbose
    if not verbose:
        # vLLM logs dozens of INFO/WARNING lines per engine start, in this process and in the
        # engine and worker processes it starts (they inherit this); -v shows them.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning")
        warnings.filterwarnings("ignore", category=FutureWarning)
        logging.getLogger("vllm").setLevel(logging.ERROR)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


@model_app.command("prepare")
def model_prepare(
    force: Annotated[bool, typer.Option(help="Convert again even if a verified copy exists.")] = False,
) -> None:
    """Convert the default SmolLM2-135M-Instruct GGUF into fp32 and bf16 HF checkpoints."""
    from agent_rl.model_store import prepare_default_model, smoke_check

    with console.status("preparing the default model (first time: about a minute)"):
        paths = prepare_default_model(force=force)
        answer = smoke_check(paths["float32"])
    for dtype, path in paths.items():
        console.print(f"[green]ok[/green] {dtype}: {path}")
    console.print(f"greedy smoke check, 'What is 2+3?' -> {answer!r}")


@model_app.command("info")
def model_info_command(
    model: Annotated[str, typer.Argument(help="'default', 'tiny', a checkpoint dir, a hub id.")] = "default",
) -> None:
    """Show a checkpoint's architecture, size and verification state."""
    from agent_rl.model_store import model_info, resolve_model

    info = model_info(resolve_model(model))
    table = Table(show_header=False)
    for key, value in info.items():
        table.add_row(key, str(value))
    console.print(table)


@app.command("generate")
def generate_command(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "default",
    max_tokens: Annotated[int, typer.Option(min=1)] = 32,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.0,
    seed: int = 0,
    check: Annotated[bool, typer.Option(help="Recompute with transformers fp32 and compare.")] = True,
) -> None:
    """Answer one prompt with the real vLLM engine; print the text and per-token logprobs."""
    from agent_rl.model_store import resolve_model
    from agent_rl.rollout.generate import generate, teacher_forced_logprobs

    model_dir = resolve_model(model)
    with console.status("starting vLLM and generating"):
        result = generate(model_dir, prompt, max_tokens=max_tokens, temperature=temperature, seed=seed)
    console.print(f"[bold]{result.text}[/bold]")
    reference = teacher_forced_logprobs(model_dir, result.prompt_ids, result.token_ids) if check else None
    compare_columns = ["transformers fp32", "|diff|"] if check else []
    table = Table("#", "token id", "token", "vLLM logprob", *compare_columns)
    for i, (token_id, token, logprob) in enumerate(
        zip(result.token_ids, result.tokens, result.logprobs, strict=True)
    ):
        extra = [f"{reference[i]:.6f}", f"{abs(reference[i] - logprob):.2e}"] if reference else []
        table.add_row(str(i), str(token_id), repr(token), f"{logprob:.6f}", *extra)
    console.print(table)
    if reference:
        worst = max(abs(a - b) for a, b in zip(reference, result.logprobs, strict=True))
        console.print(f"max |vLLM - transformers fp32| = {worst:.2e}")


@app.command("train")
def train_command(
    config_path: Annotated[Path, typer.Argument(help="A YAML run config, e.g. configs/smoke.yaml.")],
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config key: --set pipeline.num_updates=20.")
    ] = None,
) -> None:
    """Train: rollout actors and the learner on Ray, asynchronous up to max_lag (or sync)."""
    from agent_rl.config import parse_key_values
    from agent_rl.orchestrate.pipeline import train
    from agent_rl.train_config import load_train_config

    config = load_train_config(config_path, overrides=parse_key_values(overrides or [], "--set"))
    if _VERBOSE[0]:
        config = config.model_copy(update={
            "pipeline": config.pipeline.model_copy(update={"show_worker_logs": True})})
    if _already_finished(config):
        return
    from agent_rl.orchestrate.launch import resolve_run_model

    resolve_run_model(config)  # a missing model is one line, before any output
    from agent_rl.learn.distributed import layout

    console.print(layout(config.learner.world_size, config.learner.device).describe())
    if not config.pipeline.show_worker_logs:
        console.print(f"Ray and vLLM worker logs: {Path(config.out_dir) / 'worker_logs'} "
                      "(agent-rl -v train ... shows them here)")
    # A shell starts background jobs with SIGINT ignored, and Python then keeps ignoring it; a
    # `kill -INT` must still stop the run cleanly and save its ledger.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with _step_progress("update") as progress:
        bar = progress.add_task("starting actors", total=config.pipeline.num_updates)

        def on_update(metrics: dict) -> None:
            progress.update(bar, completed=metrics.get("step", 0), description=(
                f"reward {metrics.get('charts/reward_mean', float('nan')):.3f}  "
                f"IS max/med {metrics.get('is/max_over_median', float('nan')):.3f}  "
                f"lag max {metrics.get('lag/max', 0)}"))

        def on_status(text: str) -> None:
            progress.update(bar, description=text)

        try:
            summary = train(config, on_update=on_update, on_status=on_status)
        except BaseException:
            _print_saved_ledger(Path(config.out_dir))
            raise
    console.print(f"run dir: {summary.run_dir}  updates: {summary.updates}  "
                  f"updates/hour: {summary.updates_per_hour:.1f}  max lag: {summary.lag_max}")
    console.print(f"ledger (saved in {summary.run_dir}/ledger.json): {summary.ledger}")
    from agent_rl.diagnostics.plot import plot_run

    try:
        plots = plot_run(summary.run_dir)
    except FileNotFoundError:  # no update finished, so no metrics to plot
        plots = []
    if plots:
        console.print(f"plots: {plots[0].parent}")


@app.command("sft")
def sft_command(
    config_path: Annotated[Path, typer.Argument(help="A YAML SFT config, e.g. configs/sft.yaml.")],
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config key: --set epochs=2.")
    ] = None,
) -> None:
    """Supervised cold start: train on demonstrations (the env oracle's, or your JSONL chats)."""
    from agent_rl.config import parse_key_values
    from agent_rl.learn.sft import run_sft
    from agent_rl.learn.sft_config import load_sft_config
    from agent_rl.model_store import resolve_model

    config = load_sft_config(config_path, overrides=parse_key_values(overrides or [], "--set"))
    resolve_model(config.model, config.dtype)  # a missing model is one line, before any output
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with _step_progress("sft step") as progress:
        bar = progress.add_task("rendering demonstrations, loading the model", total=None)

        def on_step(step: int, total: int, metrics: dict) -> None:
            progress.update(bar, completed=step, total=total, description=(
                f"loss {metrics['losses/sft_loss']:.3f}  epoch {metrics['epoch']:.2f}  "
                f"{metrics['perf/tokens_per_s']:.0f} tok/s"))

        summary = run_sft(config, on_step=on_step)
    dropped = f", refused {summary.dropped}" if summary.dropped else ""
    console.print(f"run dir: {summary.run_dir}  steps: {summary.steps}  demonstrations: "
                  f"{summary.demonstrations}{dropped}  final loss: {summary.final_loss:.3f}")
    console.print(f"model: {summary.model_dir} (agent-rl eval --model {summary.run_dir}; "
                  f"init_from: {summary.run_dir} in a train config)")


def _step_progress(unit: str) -> Progress:
    """A bar of steps done / total, elapsed time and a line of the latest figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{unit}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.description}"), console=console)


def _already_finished(config: TrainConfig) -> bool:
    """Say whether the run resumes or is done, before anything slow starts; True when done."""
    from agent_rl.learn.checkpoint import checkpoint_version, latest_checkpoint

    previous = latest_checkpoint(Path(config.out_dir)) if config.resume else None
    if previous is None:
        return False
    version, total = checkpoint_version(previous), config.pipeline.num_updates
    if version >= total:
        console.print(f"{config.out_dir} has already finished: update {version} of {total} "
                      f"({previous}). Raise pipeline.num_updates to train on, or choose another "
                      "out_dir for a new run.")
        return True
    console.print(f"resuming from update {version} of {total} ({previous})")
    return False


def _print_saved_ledger(run_dir: Path) -> None:
    """On an error or Ctrl-C the pipeline has saved its ledger; show it before the error."""
    from agent_rl.orchestrate.ledger import LEDGER_FILE, read_ledger

    if not (run_dir / LEDGER_FILE).exists():
        console.print("stopped before the first update: no group was trained, nothing to resume")
        return
    if (run_dir / LEDGER_FILE).exists():
        ledger = read_ledger(run_dir)
        waiting = len(ledger["queued"]) + len(ledger["in_flight"]) + len(ledger["to_rerun"])
        console.print(f"ledger at exit (saved in {run_dir / LEDGER_FILE}): {ledger['counts']}, "
                      f"{waiting} group(s) queued, in flight or to re-run; "
                      "running the same command again resumes from the last checkpoint")


@app.command("soak")
def soak_command(
    minutes: Annotated[float, typer.Option(min=0.1)] = 10.0,
    fault_every: Annotated[float, typer.Option(min=1.0, help="Seconds between faults.")] = 30.0,
    config_path: Annotated[Path, typer.Option("--config")] = Path("configs/smoke.yaml"),
    out: Annotated[Path, typer.Option(help="Where soak_report.json goes.")] = Path("runs/soak"),
) -> None:
    """Run the tiny-model pipeline with random faults; report faults, losses and the ledger check."""
    from agent_rl.diagnostics import soak

    report = soak.run(console, minutes, fault_every_s=fault_every, config_path=config_path, out_dir=out)
    if not report["ledger_balanced"]:
        raise typer.Exit(1)


@app.command("plot")
def plot_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    block: Annotated[int, typer.Option(min=1, help="Updates per row of the reward table.")] = 10,
) -> None:
    """Write PNG curves (reward, IS weights, KL, grad norm, lag), the learning summary
    (plots/blocks.json) and print reward per block."""
    from rich.table import Table

    from agent_rl.diagnostics.plot import learning_summary, plot_run, reward_blocks
    from agent_rl.metrics import read_metrics

    for path in plot_run(run_dir):
        console.print(f"wrote {path}")
    summary_path = run_dir / "plots" / "blocks.json"
    summary = learning_summary(read_metrics(run_dir), block)
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    console.print(f"wrote {summary_path}")
    table = Table("updates", "responses", "reward mean", "task reward", "flat/groups", "IS max",
                  "IS max/median", "lag max")

    def cell(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for row in reward_blocks(read_metrics(run_dir), block):
        table.add_row(f"{row['first']}-{row['last']}", str(row["responses"]),
                      f"{row['reward_mean']:.3f}", f"{row['task_reward_mean']:.3f}",
                      f"{row['flat_groups']}/{row['groups']}",
                      cell(row["is_max"], ".3f"), cell(row["is_max_over_median"], ".3f"),
                      cell(row["lag_max"], "d"))
    console.print(table)


@app.command("mismatch")
def mismatch_command(
    model: Annotated[str, typer.Option(help="'default', 'tiny', or a checkpoint dir.")] = "default",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,8,32",
    dtypes: Annotated[str, typer.Option(help="Comma-separated: float32,bfloat16.")] = "float32,bfloat16",
    max_tokens: Annotated[int, typer.Option(min=1)] = 64,
    out: Annotated[Path, typer.Option(help="A directory: mismatch.json and mismatch.png go there.")
                   ] = Path("runs/mismatch"),
) -> None:
    """Rollout-vs-learner logprob mismatch, default vs matched kernels, side by side."""
    from agent_rl.diagnostics import mismatch
    from agent_rl.model_store import resolve_model

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file; --out names the directory the report goes to")

    mismatch.run(console, resolve_model(model), batch_sizes=_ints(batch_sizes),
                 dtypes=tuple(dtypes.split(",")), max_tokens=max_tokens, out_dir=out)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"expected comma-separated integers, got {text!r}") from None


def main() -> None:
    """Entry point: run the app and turn user-fixable errors into one line."""
    try:
        _register_optional_commands()
    except ImportError as err:
        logging.getLogger(__name__).debug("optional commands unavailable: %s", err)
    try:
        app()
    except Exception as err:
        if not is_user_error(err):
            raise
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {err}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
