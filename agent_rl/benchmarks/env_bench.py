"""Env overhead: reset latency and the time `step()` adds on top of the tools' own work.

The env's job per step is parsing the turn, validating calls, building messages and
bookkeeping; it should cost well under 1 ms so that rollouts wait on the model and the
sandbox, not on the env. Tool time is measured inside the env (`info["tool_seconds"]`) and
subtracted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium
from rich.console import Console
from rich.table import Table

from envs.loading import make_env
from envs.tool_calls import format_tool_call
from envs.tool_env import ToolEnv

STEP_TARGET_MS = 1.0


def run(
    console: Console, env_id: str = "agent_rl/PythonTool-v0", steps: int = 200
) -> list[dict[str, Any]]:
    """Time `steps` resets and steps of `env_id`; returns one row per measured operation."""
    env = make_env(env_id)
    try:
        env.reset(seed=0)
        env.step(_noop_call(env) or env.action_space.sample())  # warm up: sandbox start, imports
        # The < 1 ms target is for ToolEnv's own bookkeeping; other envs (Desktop-v0 takes a
        # screenshot per step) report their step latency without one.
        target_ms = STEP_TARGET_MS if isinstance(env.unwrapped, ToolEnv) else None
        rows = [
            _time_resets(env, steps),
            _time_steps(env, steps, "step, no tool call", env.action_space.sample, target_ms),
        ]
        noop = _noop_call(env)
        if noop is not None:
            rows.append(_time_steps(env, steps, "step, no-op tool call (excl. tool)",
                                    lambda: noop, target_ms))
    finally:
        env.close()
    for row in rows:
        row["env_id"] = env_id
    _print(console, env_id, rows)
    return rows


def _noop_call(env: gymnasium.Env) -> str | None:
    """A call to a tool that does nothing, if the env has the python tool."""
    tools = getattr(env.unwrapped, "tools", {})
    if "python" in tools:
        return format_tool_call("python", {"code": "pass"})
    return None


def _time_resets(env: gymnasium.Env, count: int) -> dict[str, Any]:
    samples = []
    for index in range(count):
        started = time.perf_counter()
        env.reset(seed=index)
        samples.append(time.perf_counter() - started)
    return _summary("reset", samples, tool_s=0.0, target_ms=None)


def _time_steps(
    env: gymnasium.Env,
    count: int,
    name: str,
    make_action: Callable[[], str],
    target_ms: float | None,
) -> dict[str, Any]:
    samples, tool_seconds = [], []
    env.reset(seed=0)
    for _ in range(count):
        action = make_action()
        started = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        elapsed = time.perf_counter() - started
        tool_s = float(info.get("tool_seconds", 0.0))
        samples.append(elapsed - tool_s)
        tool_seconds.append(tool_s)
        if terminated or truncated:
            env.reset()
    return _summary(name, samples, tool_s=statistics.fmean(tool_seconds), target_ms=target_ms)


def _summary(
    name: str, samples: list[float], tool_s: float, target_ms: float | None
) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "operation": name,
        "count": len(samples),
        "mean_ms": 1000 * statistics.fmean(samples),
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "tool_mean_ms": 1000 * tool_s,
        "target_ms": target_ms,
    }


def _print(console: Console, env_id: str, rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"Env overhead: {env_id}")
    for column in ("operation", "count", "mean ms", "p50 ms", "p95 ms", "tool ms", "target"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for row in rows:
        target = row["target_ms"]
        verdict = "" if target is None else ("ok" if row["p50_ms"] < target else "over")
        table.add_row(
            row["operation"], str(row["count"]), f"{row['mean_ms']:.3f}", f"{row['p50_ms']:.3f}",
            f"{row['p95_ms']:.3f}", f"{row['tool_mean_ms']:.3f}",
            "" if target is None else f"< {target:g} ms {verdict}",
        )
    console.print(table)
