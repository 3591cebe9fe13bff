"""Evaluating a checkpoint on held-out tasks: k episodes per task through the real rollout stack.

`evaluate` resolves the model (a checkpoint dir, "tiny"/"default", or a training run's latest
checkpoint), starts a `RolloutActor` (vLLM engine + gymnasium env), samples every selected task k
times, and reduces the episodes to an `EvalReport` (see `agent_rl.evaluate.report`). The
`agent-rl eval` command (`agent_rl.cli.eval`) owns all printing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent_rl.errors import UserError
from agent_rl.evaluate.passk import SUCCESS_THRESHOLD
from agent_rl.evaluate.report import (
    EpisodeResult,
    EvalReport,
    build_report,
    write_report,
)
from agent_rl.trajectory import Group, Trajectory

logger = logging.getLogger(__name__)

DEFAULT_ENV_ID = "agent_rl/PythonTool-v0"
COMPARE_FILE = "compare.md"


class EvalError(UserError, ValueError):
    """An evaluation that cannot run as asked (no tasks, a run without checkpoints, ...)."""


@dataclass(frozen=True)
class ResolvedModel:
    """What the engine loads: a HF checkpoint dir (a run checkpoint's `hf/` export), with the
    policy version it holds when it comes from a training run."""

    model_dir: Path
    label: str
    policy_version: int = 0


def resolve_eval_model(name_or_run: str | Path) -> ResolvedModel:
    """Turn --model into a checkpoint: a HF dir, "tiny"/"default", a run dir or one of its
    `checkpoints/update_N` folders (a run dir means its latest checkpoint).

    Raises:
        EvalError: a run dir without checkpoints, or a checkpoint whose base model is unknown.
        ModelNotFoundError: anything else that is not a usable checkpoint.
    """
    from agent_rl.learn.checkpoint import CHECKPOINTS_DIR, latest_checkpoint
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
    from agent_rl.learn.hf_export import InitFromError, export_run_checkpoint
    from agent_rl.model_store import resolve_model

    version = int(checkpoint.name.rsplit("_", 1)[-1]) if checkpoint.name[-1].isdigit() else 0
    for exported in (checkpoint / "hf", checkpoint):
        if (exported / "config.json").exists():
            return ResolvedModel(exported, str(checkpoint), version)
    config_path = run_dir / "config.yaml"
    if not config_path.exists():
        raise EvalError(
            f"checkpoint {checkpoint} holds learner weights only and {config_path} (which names "
            "the base model) is missing; give the run dir that wrote it"
        )
    base = (yaml.safe_load(config_path.read_text()) or {}).get("model")
    if not base:
        raise EvalError(f"{config_path} has no `model` key naming the base checkpoint")
    try:
        exported = export_run_checkpoint(checkpoint, resolve_model(base))
    except InitFromError as error:
        raise EvalError(str(error)) from error
    return ResolvedModel(exported, str(checkpoint), version)


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
    """Reduce a trajectory to its report figures and decoded transcript. Tool calls are
    training's (`agent_rl.trajectory.tool_calls`), so a report and a run's charts agree."""
    from agent_rl.trajectory import END_ENV_ERROR, END_TERMINATED, tool_calls

    transcript = transcript_segments(trajectory, tokenizer)
    num_tool_calls = tool_calls(trajectory)
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
        used_tool=num_tool_calls > 0,
        answered=trajectory.end_reason == END_TERMINATED,
        success_threshold=success_threshold,
        error=trajectory.info.get("error") if trajectory.end_reason == END_ENV_ERROR else None,
        interpreter_deaths=int(trajectory.info.get("interpreter_deaths", 0)),
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


async def _evaluate_async(
    model: str | Path,
    env_id: str = DEFAULT_ENV_ID,
    tasks: str | Path | None = None,
    split: str = "heldout",
    k: int = 4,
    temperature: float | None = None,
    limit_per_category: int | None = None,
    out_dir: str | Path | None = None,
    *,
    task_rows: Sequence[dict[str, Any]] | None = None,
    max_tokens_per_turn: int = 512,
    max_turns: int | None = None,
    context_budget: int = 4096,
    max_model_len: int | None = None,
    kv_cache_gib: float = 1.0,
    dtype: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    max_concurrent_episodes: int = 32,
    seed: int | None = 0,
    success_threshold: float = SUCCESS_THRESHOLD,
    label: str | None = None,
    on_episodes: Callable[[int, int], None] | None = None,
    agent: str | None = None,
    agent_time_limit_s: float = 600.0,
    agent_history: str = "refuse",
) -> EvalReport:
    """`evaluate`'s body, in an event loop: the actor's episodes are coroutines.

    `on_episodes(done, total)` is called as tasks finish (a progress bar's hook); `task_rows`
    gives the tasks directly (a fixed held-out subset). `agent` ("module:function") plays the
    tasks through the OpenAI-compatible endpoint instead of the env's step loop
    (`agent_rl.rollout.agents`).
    """
    if k < 1:
        raise EvalError(f"k must be at least 1, got {k}")
    temperature = default_temperature(k) if temperature is None else temperature
    env_kwargs = {"split": split, **(env_kwargs or {})}
    if max_turns is not None:
        env_kwargs["max_turns"] = max_turns
    if task_rows is None:
        task_rows = load_eval_tasks(tasks, split, env_id, env_kwargs)
    selected = select_tasks(task_rows, limit_per_category)
    if not selected:
        raise EvalError(f"no tasks to evaluate (source {tasks or env_id!r}, split {split!r})")

    if agent is not None:
        _load_agent(agent)
    started = time.perf_counter()
    resolved = resolve_eval_model(model)
    actor = await start_eval_actor(
        resolved, env_id, env_kwargs, temperature, max_tokens_per_turn, context_budget,
        max_model_len, kv_cache_gib, seed, dtype,
        # an agent holds a thread for its whole episode: one per episode in flight
        {"agent": agent, "agent_time_limit_s": agent_time_limit_s, "agent_history": agent_history,
         "env_threads": max(32, max_concurrent_episodes)},
    )
    try:
        metadata = actor.metadata()
        if on_episodes is not None:
            on_episodes(0, len(selected) * k)
        groups = await _sample_groups(actor, selected, k, max_concurrent_episodes, on_episodes)
        policy_version = actor.policy_version
    finally:
        await actor.shutdown()
    settings = {
        **({"agent": agent} if agent is not None else {}),
        "checkpoint": resolved.label,
        "policy_version": policy_version,
        "env_kwargs": env_kwargs,
        "limit_per_category": limit_per_category,
        "max_tokens_per_turn": metadata["rollout"]["max_tokens_per_turn"],
        "context_budget": metadata["context_budget"],
        "seed": metadata["rollout"]["seed"],
        "dtype": metadata["engine"]["dtype"],
    }
    report, episodes = _report(
        groups,
        tokenizer=actor.tokenizer,
        model=label or str(model),
        env_id=env_id,
        tasks_source=str(tasks) if tasks is not None else f"{env_id}:{split}",
        split=split,
        k=k,
        temperature=temperature,
        success_threshold=success_threshold,
        settings=settings,
        wall_s=time.perf_counter() - started,
    )
    if out_dir is not None:
        paths = write_report(report, episodes, Path(out_dir))
        logger.info("evaluation written to %s", paths["json"].parent)
    return report


def _report(
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
    """The report of the sampled groups (one group of k episodes per task), with transcripts."""
    episodes = [
        episode_result(trajectory, index, tokenizer, success_threshold)
        for group in groups
        for index, trajectory in enumerate(group.episode_ends)
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
    model: str | Path,
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
    `_evaluate_async` (task_rows, max_tokens_per_turn, max_turns, context_budget, ...).
    """
    return asyncio.run(
        _evaluate_async(
            model, env_id, tasks, split, k, temperature, limit_per_category, out_dir, **options
        )
    )


async def start_eval_actor(
    resolved: ResolvedModel,
    env_id: str,
    env_kwargs: dict[str, Any],
    temperature: float,
    max_tokens_per_turn: int,
    context_budget: int,
    max_model_len: int | None,
    kv_cache_gib: float,
    seed: int | None,
    dtype: str | None = None,
    rollout_options: dict[str, Any] | None = None,
) -> Any:
    """A started rollout actor on `resolved` under the matched kernels where the model is a Llama,
    as evaluations (and the endpoint benchmark) play it."""
    from agent_rl.rollout.actor import RolloutActor
    from agent_rl.rollout.config import RolloutConfig
    from agent_rl.rollout.engine import EngineConfig

    engine_dir = _engine_model_dir(resolved.model_dir)
    engine_config = EngineConfig(
        model=str(engine_dir),
        max_model_len=max_model_len or context_budget,
        # Bit-exact with the matched model: each turn then prefills only what the env added,
        # and every episode shares the system prompt's KV.
        enable_prefix_caching=engine_dir != resolved.model_dir,
        kv_cache_gib=kv_cache_gib,
        seed=seed or 0,
        **({"dtype": dtype, "lm_head_fp32": dtype == "float32"} if dtype else {}),
    )
    rollout_config = RolloutConfig(
        temperature=temperature,
        max_tokens_per_turn=max_tokens_per_turn,
        context_budget=context_budget,
        seed=seed,
        env_id=env_id,
        env_kwargs=env_kwargs,
        **(rollout_options or {}),
    )
    actor = RolloutActor(engine_config, rollout_config, name="eval",
                         initial_version=resolved.policy_version)
    try:
        await actor.start()
    except BaseException:
        await actor.shutdown()
        raise
    return actor


def _engine_model_dir(model_dir: Path) -> Path:
    """The checkpoint under the matched Llama when it is a Llama: the model training's rollout
    runs, so a base model and its trained checkpoint are scored by the same kernels (and prefix
    caching stays bit-exact)."""
    import hashlib

    from agent_rl.model_store import agent_rl_home
    from kernels.checkpoint import use_matched_architecture

    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        return model_dir
    source = model_dir.resolve()
    key = hashlib.sha1(str(source).encode()).hexdigest()[:10]
    return use_matched_architecture(source, agent_rl_home() / "matched" / f"{source.name}-{key}")


def _load_agent(spec: str) -> Any:
    """The agent function, loaded before any engine starts so a wrong spec fails at once (the
    actor loads it again to play it)."""
    from agent_rl.rollout.agents import AgentLoadError, load_agent

    try:
        return load_agent(spec)
    except AgentLoadError as error:
        raise EvalError(str(error)) from error


async def _sample_groups(
    actor: Any, tasks: Sequence[dict[str, Any]], k: int, max_concurrent_episodes: int,
    on_episodes: Callable[[int, int], None] | None = None,
) -> list[Any]:
    """One group of k episodes per task, about `max_concurrent_episodes` episodes at once (whole
    groups, at least one): the engine batches them, and sandbox sessions stay bounded. On 2 CPU
    cores 32 greedy episodes at once took 128 s where 8 took 176 s (the decode step's cost is
    mostly per step, not per sequence)."""
    gate = asyncio.Semaphore(max(1, max_concurrent_episodes // k))
    done = [0]

    async def one(task: dict[str, Any]) -> Any:
        async with gate:
            group = await actor.generate_group(task, k)
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
