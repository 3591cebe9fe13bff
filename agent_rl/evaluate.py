"""Evaluating a checkpoint on held-out tasks: k episodes per task through the real rollout stack.

`evaluate` resolves the model (a checkpoint dir, "tiny"/"default", or a training run's latest
checkpoint), starts a `RolloutActor` (vLLM engine + gymnasium env), samples every selected task k
times, and reduces the episodes to an `EvalReport` (see `agent_rl.eval_report`). The learner can
instead pass its own running actor so that no second engine starts. `eval_command` is the
`agent-rl eval` CLI entry point; it owns all printing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from agent_rl.eval_report import (
    EpisodeResult,
    EvalReport,
    build_report,
    compare,
    load_report,
    model_table,
    report_table,
    write_report,
)
from agent_rl.passk import SUCCESS_THRESHOLD
from agent_rl.trajectory import Group, Trajectory

logger = logging.getLogger(__name__)

DEFAULT_ENV_ID = "agent_rl/PythonTool-v0"
TOOL_CALL_TAG = "<tool_call>"
COMPARE_FILE = "compare.md"


class EvalError(ValueError):
    """An evaluation that cannot run as asked (no tasks, a run without checkpoints, ...)."""


@dataclass(frozen=True)
class ResolvedModel:
    """What the engine loads: a HF checkpoint dir, and optionally weights to load on top of it.

    `weights` is set for a training-run checkpoint, whose learner state holds the trained
    weights under Hugging Face names while the run's base model supplies config and tokenizer.
    """

    model_dir: Path
    label: str
    weights_file: Path | None = None
    policy_version: int | None = None


def resolve_eval_model(name_or_run: str | Path) -> ResolvedModel:
    """Turn --model into a checkpoint: a HF dir, "tiny"/"default", a run dir or one of its
    `checkpoints/update_N` folders (a run dir means its latest checkpoint).

    Raises:
        EvalError: a run dir without checkpoints, or a checkpoint whose base model is unknown.
        ModelNotFoundError: anything else that is not a usable checkpoint.
    """
    from agent_rl.checkpoint import CHECKPOINTS_DIR, latest_checkpoint
    from agent_rl.model_store import resolve_model

    path = Path(name_or_run).expanduser()
    if path.is_dir() and not (path / "config.json").exists():
        if (path / CHECKPOINTS_DIR).is_dir():
            checkpoint = latest_checkpoint(path)
            if checkpoint is None:
                raise EvalError(
                    f"run {path} has no complete checkpoint under {CHECKPOINTS_DIR}/ yet; "
                    "train until one is written or give a checkpoint dir"
                )
            return _resolve_run_checkpoint(path, checkpoint)
        if (path / "learner.pt").exists():
            return _resolve_run_checkpoint(path.parent.parent, path)
    return ResolvedModel(model_dir=resolve_model(name_or_run), label=str(name_or_run))


def _resolve_run_checkpoint(run_dir: Path, checkpoint: Path) -> ResolvedModel:
    from agent_rl.model_store import resolve_model

    for exported in (checkpoint / "hf", checkpoint):
        if (exported / "config.json").exists():
            return ResolvedModel(model_dir=exported, label=str(checkpoint))
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise EvalError(
            f"checkpoint {checkpoint} holds learner weights only and {config_path} (which names "
            "the base model) is missing; give the run dir that wrote it"
        )
    base = (yaml.safe_load(config_path.read_text()) or {}).get("model")
    if not base:
        raise EvalError(f"{config_path} has no `model` key naming the base checkpoint")
    version = int(checkpoint.name.rsplit("_", 1)[-1]) if checkpoint.name[-1].isdigit() else None
    return ResolvedModel(
        model_dir=resolve_model(base),
        label=str(checkpoint),
        weights_file=checkpoint / "learner.pt",
        policy_version=version,
    )


def load_eval_tasks(
    tasks: str | Path | None, split: str, env_id: str, env_kwargs: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The task rows to evaluate: a task file's, or the env's own task set for `split`."""
    if tasks is not None:
        from envs.tasks import load_tasks

        return [dict(row) for row in load_tasks(path=tasks)]
    from envs.loading import env_tasks

    kwargs = {key: value for key, value in (env_kwargs or {}).items() if key != "split"}
    return env_tasks(env_id, split, **kwargs)


def select_tasks(
    rows: Sequence[dict[str, Any]], limit_per_category: int | None
) -> list[dict[str, Any]]:
    """The first `limit_per_category` tasks of each category, in file order (deterministic)."""
    if limit_per_category is not None and limit_per_category < 1:
        raise EvalError(f"limit_per_category must be at least 1, got {limit_per_category}")
    taken: dict[str, int] = defaultdict(int)
    chosen = []
    for row in rows:
        category = str(row.get("category") or "default")
        if limit_per_category is None or taken[category] < limit_per_category:
            taken[category] += 1
            chosen.append(row)
    return chosen


def default_temperature(k: int) -> float:
    """Greedy for a single sample; plain sampling when k > 1 (k greedy samples would be equal)."""
    return 0.0 if k == 1 else 1.0


def episode_result(
    trajectory: Trajectory,
    sample_index: int,
    tokenizer: Any,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> EpisodeResult:
    """Reduce a trajectory to its report figures and decoded transcript.

    Tool calls are counted as `<tool_call>` blocks in the model's own text: the env's step info
    reports only the latest turn, and this counts malformed attempts too, which is what the
    model spent its turns on.
    """
    from agent_rl.trajectory import END_ENV_ERROR, END_TERMINATED
    from envs.tool_calls import parse_tool_calls
    from envs.tools import ANSWER_TOOL_NAME

    transcript = transcript_segments(trajectory, tokenizer)
    model_text = [segment["text"] for segment in transcript if segment["source"] == "model"]
    num_tool_calls = sum(text.count(TOOL_CALL_TAG) for text in model_text)
    used_tool = any(call.name != ANSWER_TOOL_NAME
                    for text in model_text for call in parse_tool_calls(text).valid_calls)
    return EpisodeResult(
        task_id=trajectory.task_id,
        category=trajectory.category or "default",
        sample_index=sample_index,
        reward=trajectory.reward,
        num_turns=trajectory.num_turns,
        num_tool_calls=num_tool_calls,
        num_model_tokens=trajectory.num_model_tokens,
        num_tokens=len(trajectory.token_ids),
        end_reason=trajectory.end_reason,
        transcript=transcript,
        used_tool=used_tool,
        answered=trajectory.end_reason == END_TERMINATED,
        success_threshold=success_threshold,
        error=trajectory.info.get("error") if trajectory.end_reason == END_ENV_ERROR else None,
    )


def transcript_segments(trajectory: Trajectory, tokenizer: Any) -> list[dict[str, str]]:
    """The episode's text split where `loss_mask` changes: what the model wrote vs was fed.

    Special tokens are kept so the chat template's role markers show who spoke.
    """
    segments: list[dict[str, str]] = []
    start = 0
    ids, mask = trajectory.token_ids, trajectory.loss_mask
    for end in range(1, len(ids) + 1):
        if end == len(ids) or mask[end] != mask[start]:
            text = tokenizer.decode(ids[start:end], skip_special_tokens=False)
            segments.append({"source": "model" if mask[start] else "env", "text": text})
            start = end
    return segments


async def evaluate_async(
    model: str | Path | None = None,
    env_id: str = DEFAULT_ENV_ID,
    tasks: str | Path | None = None,
    split: str = "heldout",
    k: int = 4,
    temperature: float | None = None,
    limit_per_category: int | None = None,
    out_dir: str | Path | None = None,
    *,
    actor: Any = None,
    task_rows: Sequence[dict[str, Any]] | None = None,
    max_tokens_per_turn: int = 512,
    max_turns: int | None = None,
    context_budget: int = 4096,
    max_model_len: int | None = None,
    kv_cache_gib: float = 1.0,
    env_kwargs: dict[str, Any] | None = None,
    max_concurrent_tasks: int = 8,
    seed: int | None = 0,
    success_threshold: float = SUCCESS_THRESHOLD,
    label: str | None = None,
    on_episodes: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """`evaluate` for callers already in an event loop (the training pipeline).

    `on_episodes(done, total)` is called as tasks finish (a progress bar's hook).

    Pass `actor` (a started or unstarted `RolloutActor`, or a Ray handle to one) to reuse its
    engine and current weights; then `model` is only a label, and sampling settings
    (temperature, turn length) are the actor's: a different `temperature` is refused rather than
    silently ignored. `task_rows` gives the tasks directly (a fixed held-out subset).
    """
    if k < 1:
        raise EvalError(f"k must be at least 1, got {k}")
    if actor is None and model is None:
        raise EvalError("evaluate needs a model (checkpoint dir, 'tiny', run dir) or an actor")
    temperature = default_temperature(k) if temperature is None else temperature
    env_kwargs = {"split": split, **(env_kwargs or {})}
    if max_turns is not None:
        env_kwargs["max_turns"] = max_turns
    if task_rows is None:
        task_rows = load_eval_tasks(tasks, split, env_id, env_kwargs)
    selected = select_tasks(task_rows, limit_per_category)
    if not selected:
        raise EvalError(f"no tasks to evaluate (source {tasks or env_id!r}, split {split!r})")

    started = time.perf_counter()
    owns_actor = actor is None
    resolved: ResolvedModel | None = None
    if owns_actor:
        resolved = resolve_eval_model(model)
        actor = await _start_actor(
            resolved, env_id, env_kwargs, temperature, max_tokens_per_turn, context_budget,
            max_model_len, kv_cache_gib, seed,
        )
    try:
        metadata = await _call(actor, "metadata")
        actor_temperature = float(metadata["rollout"]["temperature"])
        if not owns_actor and actor_temperature != temperature:
            raise EvalError(
                f"the given actor samples at temperature {actor_temperature:g}, but the eval asks "
                f"for {temperature:g}; pass temperature={actor_temperature:g} or let evaluate "
                "start its own actor"
            )
        if on_episodes is not None:
            on_episodes(0, len(selected) * k)
        groups = await _sample_groups(actor, selected, k, max_concurrent_tasks, on_episodes)
        policy_version = await _call(actor, "get_policy_version")
    finally:
        if owns_actor:
            await actor.shutdown()
    settings = {
        "checkpoint": resolved.label if resolved else None,
        "policy_version": policy_version,
        "env_kwargs": env_kwargs,
        "limit_per_category": limit_per_category,
        "max_tokens_per_turn": metadata["rollout"]["max_tokens_per_turn"],
        "context_budget": metadata["context_budget"],
        "seed": metadata["rollout"]["seed"],
        "dtype": metadata["engine"]["dtype"],
    }
    model_dir = metadata["engine"]["model"]
    report, episodes = report_from_groups(
        groups,
        tokenizer=model_dir,
        model=label or str(model if model is not None else model_dir),
        env_id=env_id,
        tasks_source=str(tasks) if tasks is not None else f"{env_id}:{split}",
        split=split,
        k=k,
        temperature=actor_temperature,
        success_threshold=success_threshold,
        settings=settings,
        wall_s=time.perf_counter() - started,
    )
    if out_dir is not None:
        paths = write_report(report, episodes, Path(out_dir))
        logger.info("evaluation written to %s", paths["json"].parent)
    return report


def report_from_groups(
    groups: Sequence[Group],
    *,
    tokenizer: Any,
    model: str,
    env_id: str,
    tasks_source: str,
    split: str,
    k: int,
    temperature: float,
    success_threshold: float = SUCCESS_THRESHOLD,
    settings: dict[str, Any] | None = None,
    wall_s: float = 0.0,
) -> tuple[EvalReport, list[EpisodeResult]]:
    """The report of groups sampled elsewhere (one group of k episodes per task).

    For a caller that samples with its own actors (the training pipeline's periodic eval);
    `tokenizer` is a tokenizer or the checkpoint dir to load one from, for the transcripts.
    """
    if isinstance(tokenizer, str | Path):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    episodes = [
        episode_result(trajectory, index, tokenizer, success_threshold)
        for group in groups
        for index, trajectory in enumerate(group.trajectories)
    ]
    failed = [episode for episode in episodes if episode.error is not None]
    if failed:
        logger.warning(
            "%d of %d episodes ended by an error, e.g. task %s: %s",
            len(failed), len(episodes), failed[0].task_id, failed[0].error,
        )
    settings = {**(settings or {}), "end_reasons": _count(e.end_reason for e in episodes)}
    report = build_report(
        episodes,
        model=model,
        env_id=env_id,
        tasks_source=tasks_source,
        split=split,
        k=k,
        temperature=temperature,
        settings=settings,
        wall_s=wall_s,
    )
    return report, episodes


def evaluate(
    model: str | Path | None = None,
    env_id: str = DEFAULT_ENV_ID,
    tasks: str | Path | None = None,
    split: str = "heldout",
    k: int = 4,
    temperature: float | None = None,
    limit_per_category: int | None = None,
    out_dir: str | Path | None = None,
    **options: Any,
) -> EvalReport:
    """Run every selected task k times through the real rollout actor and env; report pass@k.

    temperature defaults to greedy (0.0) for k == 1 and 1.0 for k > 1. An episode passes when
    its reward >= `success_threshold` (1.0: a fully correct final answer). With `out_dir`, writes
    report.json, report.md and transcripts.jsonl there. Keyword `options` are those of
    `evaluate_async` (actor, task_rows, max_tokens_per_turn, max_turns, context_budget, ...).
    """
    return asyncio.run(
        evaluate_async(
            model, env_id, tasks, split, k, temperature, limit_per_category, out_dir, **options
        )
    )


async def _start_actor(
    resolved: ResolvedModel,
    env_id: str,
    env_kwargs: dict[str, Any],
    temperature: float,
    max_tokens_per_turn: int,
    context_budget: int,
    max_model_len: int | None,
    kv_cache_gib: float,
    seed: int | None,
) -> Any:
    from agent_rl.engine import EngineConfig
    from agent_rl.rollout import RolloutActor, RolloutConfig

    engine_dir = _engine_model_dir(resolved.model_dir)
    engine_config = EngineConfig(
        model=str(engine_dir),
        max_model_len=max_model_len or context_budget,
        # Bit-exact with the matched model: each turn then prefills only what the env added,
        # and every episode shares the system prompt's KV.
        enable_prefix_caching=engine_dir != resolved.model_dir,
        kv_cache_gib=kv_cache_gib,
        seed=seed or 0,
    )
    rollout_config = RolloutConfig(
        temperature=temperature,
        max_tokens_per_turn=max_tokens_per_turn,
        context_budget=context_budget,
        seed=seed,
        env_id=env_id,
        env_kwargs=env_kwargs,
    )
    # Read (and name-check) trained weights before the engine starts, to fail in seconds.
    weights = _learner_weights(resolved) if resolved.weights_file is not None else None
    actor = RolloutActor(engine_config, rollout_config, name="eval", initial_version=0)
    try:
        await actor.start()
        if weights is not None:
            await actor.update_weights(max(resolved.policy_version or 0, 1), weights)
    except BaseException:
        await actor.shutdown()
        raise
    return actor


def _engine_model_dir(model_dir: Path) -> Path:
    """The checkpoint under the matched Llama when it is a Llama: the model training's rollout
    runs, and the one whose in-place weight load is exact (vLLM's stock Llama keeps a tied
    lm_head's old values after a reload, so a trained checkpoint would be scored wrongly), so a
    base model and its trained checkpoint are scored by the same kernels."""
    import hashlib
    import json

    from agent_rl.model_store import agent_rl_home
    from kernels.checkpoint import use_matched_architecture

    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        return model_dir
    source = model_dir.resolve()
    key = hashlib.sha1(str(source).encode()).hexdigest()[:10]
    return use_matched_architecture(source, agent_rl_home() / "matched" / f"{source.name}-{key}")


def _learner_weights(resolved: ResolvedModel) -> dict[str, Any]:
    """The trained weights of a run checkpoint, checked to be under the base model's HF names."""
    import torch
    from safetensors import safe_open

    from kernels.llama import hf_name

    assert resolved.weights_file is not None
    state = torch.load(resolved.weights_file, map_location="cpu", weights_only=True)
    weights = state.get("model", state)
    expected: set[str] = set()
    for shard in resolved.model_dir.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as handle:
            expected.update(handle.keys())
    weights = {hf_name(name): tensor for name, tensor in weights.items()}
    unknown = sorted(set(weights) - expected - {"lm_head.weight"})
    if unknown:
        raise EvalError(
            f"{resolved.weights_file} holds weights under names the base model "
            f"{resolved.model_dir} lacks (e.g. {unknown[:3]}); export the checkpoint as a "
            "Hugging Face folder and pass that dir as --model"
        )
    return weights


async def _call(actor: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call an actor method in-process or through a Ray handle (whose refs are awaitable)."""
    bound = getattr(actor, method)
    result = bound.remote(*args, **kwargs) if hasattr(bound, "remote") else bound(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


async def _sample_groups(
    actor: Any, tasks: Sequence[dict[str, Any]], k: int, max_concurrent_tasks: int,
    on_episodes: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """One group of k episodes per task; at most `max_concurrent_tasks` tasks run at once so
    that sandbox sessions and env threads stay bounded."""
    gate = asyncio.Semaphore(max_concurrent_tasks)
    done = [0]

    async def one(task: dict[str, Any]) -> Any:
        async with gate:
            group = await _call(actor, "generate_group", task, k)
            logger.info("task %s: rewards %s", group.task_id, group.rewards)
            done[0] += k
            if on_episodes is not None:
                on_episodes(done[0], len(tasks) * k)
            return group

    return list(await asyncio.gather(*(one(task) for task in tasks)))


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(sorted(counts.items()))


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
    split: Annotated[str, typer.Option(help="Task split of the env's task set.")] = "heldout",
    k: Annotated[int, typer.Option(min=1, help="Samples per task; pass@k is reported.")] = 4,
    out: Annotated[
        Path | None, typer.Option(help="Write report.json, report.md, transcripts.jsonl here.")
    ] = None,
    compare_with: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--compare",
            help="Compare A and B: two report.json files (or eval dirs), or two models to evaluate.",
        ),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0.0, help="Default: 0 (greedy) for k=1, else 1.0.")
    ] = None,
    limit_per_category: Annotated[
        int | None, typer.Option(min=1, help="Evaluate only the first N tasks of each category.")
    ] = None,
    max_tokens_per_turn: Annotated[int, typer.Option(min=1)] = 512,
    max_turns: Annotated[int | None, typer.Option(min=1, help="Default: the env's.")] = None,
    context_budget: Annotated[int, typer.Option(min=64, help="Most tokens per episode.")] = 4096,
    seed: Annotated[int, typer.Option(help="Sampling seed and bootstrap seed.")] = 0,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
    env_arg: Annotated[
        list[str] | None,
        typer.Option(help="An env argument as KEY=VALUE (YAML value), e.g. "
                     "plain_text_answers=true or categories=\\[dates]; repeatable."),
    ] = None,
) -> None:
    """Evaluate a model on held-out tasks (macro pass@1, pass@k), or compare two."""
    console = Console()
    env_id = DEFAULT_ENV_ID
    task_file: str | None = None
    if tasks is not None:
        if _is_registered_env(tasks):
            env_id = tasks
        elif Path(tasks).is_file():
            task_file = tasks
        else:
            raise EvalError(
                f"--tasks {tasks!r} is neither a registered env id (e.g. {DEFAULT_ENV_ID}) "
                "nor an existing task file (.jsonl/.parquet)"
            )
    run_options = {
        "env_id": env_id, "tasks": task_file, "split": split, "k": k, "temperature": temperature,
        "limit_per_category": limit_per_category, "max_tokens_per_turn": max_tokens_per_turn,
        "max_turns": max_turns, "context_budget": context_budget, "seed": seed,
        "env_kwargs": parse_env_args(env_arg or []),
    }
    if compare_with is None:
        if model is None:
            raise EvalError("give --model PATH_OR_RUN, or --compare A B")
        with _episode_progress(console, f"evaluating {model} (k={k})") as on_episodes:
            report = evaluate(model, out_dir=out, on_episodes=on_episodes, **run_options)
        console.print(report_table(report))
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
    comparison = compare(reports[0], reports[1], num_resamples=resamples, seed=seed,
                         label_a=compare_with[0], label_b=compare_with[1])
    console.print(comparison.table())
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / COMPARE_FILE).write_text(comparison.markdown())
        console.print(f"comparison written to {out / COMPARE_FILE}")


def compare_command(
    named_reports: Annotated[
        list[str], typer.Argument(help="NAME=EVAL_DIR (or report.json), in order, e.g. base=... "
                                  "sft=... rl=...; the CI is of the last minus the one before.")
    ],
    out: Annotated[Path | None, typer.Option(help="Write compare.md and compare.json here.")] = None,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Models evaluated on the same tasks, side by side: pass@1 per category, tool use, and the
    bootstrap CI of the last model's gain over the one before it."""
    reports = {}
    for item in named_reports:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise EvalError(f"{item!r} is not NAME=EVAL_DIR (e.g. sft=runs/demo/eval-sft)")
        reports[name] = load_report(Path(path))
    try:
        table = model_table(reports, num_resamples=resamples, seed=seed)
    except ValueError as error:
        raise EvalError(str(error)) from error
    console = Console()
    console.print(table.table())
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / COMPARE_FILE).write_text(table.markdown())
        (out / "compare.json").write_text(json.dumps(table.to_json(), indent=2) + "\n")
        console.print(f"written: {out / COMPARE_FILE}, {out / 'compare.json'}")


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
