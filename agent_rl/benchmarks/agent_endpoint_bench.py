"""What playing through the OpenAI-compatible endpoint costs against the env's own step loop.

One rollout actor, one engine: the same tasks are played greedily by `agent_rl/WordCount-v0`'s
env loop and by `examples.word_count_agent`, which does what that env does over an `openai`
client, so both modes sample the same tokens and the difference is the endpoint's (HTTP, JSON,
history matching, the agent's thread). The modes alternate round by round, the order flipped
each round, so a machine that slows down during the run slows both; a first round of each warms
the engine and its prefix cache.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from agent_rl.trajectory import END_ENV_ERROR, Group

ENV_ID = "agent_rl/WordCount-v0"
AGENT = "examples.word_count_agent:run"
TARGET = 0.9  # the endpoint's episode throughput within 10% of the env loop's
MODES = ("env", "agent")
# An agent cut off by its time limit ends early, which would flatter the endpoint: on a slow
# machine a round of 32 episodes can outlast the rollout's default limit, so the bench lifts it.
AGENT_TIME_LIMIT_S = 6 * 3600.0


def run(
    console: Console,
    model: str,
    episodes: int = 32,
    runs: int = 3,
    max_tokens_per_turn: int = 128,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Episodes/s of both modes with `episodes` in flight, `runs` timed rounds each; the median
    ratio agent/env, and whether both modes sampled the same ids."""
    result = asyncio.run(_measure(console, model, episodes, runs, max_tokens_per_turn, dtype))
    _print(console, result)
    return result


async def _measure(
    console: Console, model: str, episodes: int, runs: int, max_tokens_per_turn: int, dtype: str
) -> dict[str, Any]:
    from agent_rl.evaluate.runner import resolve_eval_model, start_eval_actor
    from envs.loading import env_tasks

    tasks = env_tasks(ENV_ID, "train")[:episodes]
    if len(tasks) < episodes:
        raise ValueError(f"{ENV_ID} has {len(tasks)} train tasks; ask for at most that many")
    actor = await start_eval_actor(
        resolve_eval_model(model), ENV_ID, {"split": "train"}, temperature=0.0,
        max_tokens_per_turn=max_tokens_per_turn, context_budget=2048, max_model_len=None,
        kv_cache_gib=1.0, seed=0, dtype=dtype,
        rollout_options={"agent": AGENT, "env_threads": max(32, episodes),
                         "agent_time_limit_s": AGENT_TIME_LIMIT_S},
    )
    rounds: list[dict[str, Any]] = []
    ids: dict[str, list[list[int]]] = {}
    try:
        for index in range(runs + 1):
            order = MODES if index % 2 == 0 else MODES[::-1]
            for mode in order:
                actor.config.agent = AGENT if mode == "agent" else None
                started = time.perf_counter()
                groups = await asyncio.gather(*(actor.generate_group(task, 1) for task in tasks))
                seconds = time.perf_counter() - started
                rounds.append(_round(mode, index, groups, seconds))
                ids[mode] = [t.token_ids for group in groups for t in group.trajectories]
                console.print(f"round {index} ({'warm-up' if index == 0 else 'timed'}) {mode}: "
                              f"{rounds[-1]['episodes_per_s']:.2f} episodes/s")
    finally:
        await actor.shutdown()
    timed = [row for row in rounds if row["round"] > 0]
    median = {mode: statistics.median(row["episodes_per_s"] for row in timed if row["mode"] == mode)
              for mode in MODES}
    return {
        "env_id": ENV_ID, "agent": AGENT, "model": model, "dtype": dtype,
        "episodes_in_flight": episodes, "runs": runs, "max_tokens_per_turn": max_tokens_per_turn,
        "rounds": rounds,
        "median_episodes_per_s": median,
        "agent_over_env": median["agent"] / median["env"],
        "target": TARGET,
        "same_ids": ids["env"] == ids["agent"],
        "timed_errors": sum(row["errors"] for row in timed),
    }


def _round(mode: str, index: int, groups: Sequence[Group], seconds: float) -> dict[str, Any]:
    trajectories = [t for group in groups for t in group.trajectories]
    return {
        "mode": mode,
        "round": index,
        "seconds": seconds,
        "episodes_per_s": len(trajectories) / seconds,
        "sampled_tokens": sum(t.num_model_tokens for t in trajectories),
        "turns": sum(t.num_turns for t in trajectories),
        "errors": sum(t.end_reason == END_ENV_ERROR for t in trajectories),
    }


def _print(console: Console, result: dict[str, Any]) -> None:
    table = Table(title=f"{result['episodes_in_flight']} episodes in flight, {result['model']}, "
                        f"{result['dtype']}, median of {result['runs']}")
    for column in ("mode", "episodes/s", "sampled tokens", "turns", "errors"):
        table.add_column(column)
    for mode in MODES:
        last = next(row for row in reversed(result["rounds"]) if row["mode"] == mode)
        table.add_row(mode, f"{result['median_episodes_per_s'][mode]:.2f}",
                      str(last["sampled_tokens"]), str(last["turns"]), str(last["errors"]))
    console.print(table)
    ratio = result["agent_over_env"]
    verdict = "meets" if ratio >= result["target"] else "misses"
    if result["timed_errors"]:
        verdict = f"not comparable: {result['timed_errors']} timed episodes ended in errors;"
    console.print(f"agent / env episodes/s: {ratio:.3f} ({verdict} the {result['target']:.0%} "
                  f"target); same sampled ids in both modes: {result['same_ids']}")
