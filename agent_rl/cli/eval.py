"""`agent-rl eval` and `agent-rl compare`: parse, call `agent_rl.evaluate`, print."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from agent_rl.evaluate.report import (
    EvalReport,
    compare,
    interpreter_death_warning,
    load_report,
    report_table,
)
from agent_rl.evaluate.runner import COMPARE_FILE, DEFAULT_ENV_ID, EvalError, evaluate


def _is_report(path: str) -> bool:
    candidate = Path(path)
    return candidate.suffix == ".json" or (candidate / "report.json").is_file()


def eval_command(
    model: Annotated[
        str | None,
        typer.Option(help="Checkpoint dir, 'tiny', 'default', or a run dir (its latest checkpoint)."),
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(help="An env id (its own task set) or a task file (.jsonl/.parquet)."),
    ] = None,
    config_path: Annotated[
        Path | None,
        typer.Option("--config", help="A run config (e.g. configs/demo.yaml): play its held-out "
                     "protocol (its env, categories, turns, tokens per turn and `evaluation:` "
                     "section); the options below override it."),
    ] = None,
    split: Annotated[
        str | None, typer.Option(help="Task split of the env's task set. Default: heldout.")
    ] = None,
    k: Annotated[
        int | None, typer.Option(min=1, help="Samples per task; pass@k is reported. Default: 4.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write report.json, report.md, transcripts.jsonl here.")
    ] = None,
    compare_with: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--compare",
            help="Compare A and B (the gain is B - A): two report.json files (or eval dirs), or "
            "two models to evaluate.",
        ),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0.0, help="Default: 0 (greedy) for k=1, else 1.0.")
    ] = None,
    limit_per_category: Annotated[
        int | None, typer.Option(min=1, help="Evaluate only the first N tasks of each category.")
    ] = None,
    max_tokens_per_turn: Annotated[int | None, typer.Option(min=1, help="Default: 512.")] = None,
    max_turns: Annotated[int | None, typer.Option(min=1, help="Default: the env's.")] = None,
    context_budget: Annotated[
        int | None, typer.Option(min=64, help="Most tokens per episode. Default: 4096.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed and bootstrap seed.")] = 0,
    resamples: Annotated[
        int | None, typer.Option(min=100, help="Bootstrap resamples. Default: 2000.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Episodes in flight at once (whole groups of k). Default: 32."),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="Your own agent, 'module:function' (an async run(task, client) "
                     "returning a reward), plays the tasks through the OpenAI-compatible "
                     "endpoint instead of the env's loop. Default: the config's env.agent."),
    ] = None,
    env_arg: Annotated[
        list[str] | None,
        typer.Option(help="An env argument as KEY=VALUE (YAML value), e.g. "
                     "plain_text_answers=true or categories=\\[dates]; repeatable."),
    ] = None,
) -> None:
    """Evaluate a model on held-out tasks (macro pass@1, pass@k), or compare two."""
    console = Console()
    run_options: dict[str, Any] = {
        "env_id": DEFAULT_ENV_ID, "split": "heldout", "k": 4, "max_tokens_per_turn": 512,
        "context_budget": 4096, "max_concurrent_episodes": 32, "env_kwargs": {},
    }
    if config_path is not None:
        from agent_rl.evaluate.config import eval_options
        from agent_rl.train_config import load_train_config

        config = load_train_config(config_path)
        run_options.update(eval_options(config))
        resamples = config.evaluation.resamples if resamples is None else resamples
    task_file: str | None = None
    if tasks is not None:
        if _is_registered_env(tasks):
            run_options["env_id"] = tasks
        elif Path(tasks).is_file():
            task_file = tasks
        else:
            raise EvalError(
                f"--tasks {tasks!r} is neither a registered env id (e.g. {DEFAULT_ENV_ID}) "
                "nor an existing task file (.jsonl/.parquet)"
            )
    given = {
        "tasks": task_file, "split": split, "k": k, "temperature": temperature,
        "limit_per_category": limit_per_category, "max_tokens_per_turn": max_tokens_per_turn,
        "max_turns": max_turns, "context_budget": context_budget,
        "max_concurrent_episodes": concurrency, "agent": agent,
    }
    run_options.update({key: value for key, value in given.items() if value is not None})
    run_options["env_kwargs"] = {**run_options["env_kwargs"], **parse_env_args(env_arg or [])}
    run_options["seed"] = seed
    resamples = 2000 if resamples is None else resamples
    k = run_options["k"]
    if compare_with is None:
        if model is None:
            raise EvalError("give --model PATH_OR_RUN, or --compare A B")
        with _episode_progress(console, f"evaluating {model} (k={k})") as on_episodes:
            report = evaluate(model, out_dir=out, on_episodes=on_episodes, **run_options)
        console.print(report_table(report))
        if report.interpreter_death_rate:
            console.print(f"[yellow]{interpreter_death_warning(report)}[/yellow]")
        if out is not None:
            console.print(f"report, markdown and transcripts written to {out}")
        return
    reports = []
    for name, which in zip(compare_with, ("a", "b"), strict=True):
        if _is_report(name):
            reports.append(load_report(Path(name)))
            continue
        target = out / which if out is not None else None
        with _episode_progress(console, f"evaluating {name} (k={k})") as on_episodes:
            reports.append(evaluate(name, out_dir=target, on_episodes=on_episodes, **run_options))
    names = list(compare_with) if compare_with[0] != compare_with[1] else ["A", "B"]
    _print_comparison(console, dict(zip(names, reports, strict=True)), out, resamples, seed)


def _print_comparison(console: Console, reports: dict[str, EvalReport], out: Path | None,
                      resamples: int, seed: int) -> None:
    try:
        comparison = compare(reports, num_resamples=resamples, seed=seed)
    except ValueError as error:
        raise EvalError(str(error)) from error
    console.print(comparison.table())
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / COMPARE_FILE).write_text(comparison.markdown())
        (out / "compare.json").write_text(json.dumps(comparison.to_json(), indent=2) + "\n")
        console.print(f"written: {out / COMPARE_FILE}, {out / 'compare.json'}")


def compare_command(
    named_reports: Annotated[
        list[str], typer.Argument(help="NAME=EVAL_DIR (or report.json), in order, e.g. base=... "
                                  "sft=... rl=...; the CI is of the last minus the one before.")
    ],
    out: Annotated[Path | None, typer.Option(help="Write compare.md and compare.json here.")] = None,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    same_episodes: Annotated[bool, typer.Option(
        "--same-episodes", help="Also count the episodes the last two played identically "
        "(transcript, token counts, turns, end, reward): e.g. the env loop against an agent "
        "over the endpoint.")] = False,
) -> None:
    """Models evaluated on the same tasks, side by side: pass@1 per category, tool use, and the
    bootstrap CI of the last model's gain over the one before it."""
    reports, paths = {}, {}
    for item in named_reports:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise EvalError(f"{item!r} is not NAME=EVAL_DIR (e.g. sft=runs/demo/eval-sft)")
        reports[name], paths[name] = load_report(Path(path)), Path(path)
    console = Console()
    _print_comparison(console, reports, out, resamples, seed)
    if same_episodes:
        from agent_rl.evaluate.same_episodes import same_episodes as match_episodes

        before, last = list(paths)[-2:]
        console.print(match_episodes(paths[before], paths[last]).line(before, last))


@contextmanager
def _episode_progress(console: Console, title: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar of episodes done / total with an ETA; yields the hook that moves it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(title, total=None)
        yield lambda done, total: progress.update(bar, completed=done, total=total)


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """`["plain_text_answers=true"]` -> `{"plain_text_answers": True}`; values are YAML."""
    from agent_rl.config import ConfigError, parse_key_values

    try:
        return parse_key_values(tuple(pairs), "--env-arg")
    except ConfigError as error:
        raise EvalError(str(error)) from error


def _is_registered_env(name: str) -> bool:
    """A registered env id, or a `module:id` (its module is imported to register it)."""
    from envs.loading import EnvContractError, resolve_env_id

    if os.path.exists(name):
        return False
    try:
        resolve_env_id(name)
    except EnvContractError:
        return False
    return True
