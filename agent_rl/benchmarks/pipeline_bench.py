"""Asynchronous (lag 64) vs synchronous training: updates per hour on the same tasks.

Both runs use the same config file, seed, task order, number of updates and env latency; only
`mode` differs. The figure is training throughput from the first submitted group to the last
update, so engine and Ray start-up are left out. With `latencies`, each env step waits as long
as the profile says (`envs.latency`: a sleep, not CPU), which is where agentic RL spends its time
and where overlap pays; each profile is one async/sync pair. The runs stay in `runs_dir`, so
`agent-rl simulate --calibrate` can read their costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent_rl.config import with_overrides
from agent_rl.metrics import read_metrics
from agent_rl.orchestrate.pipeline import RunSummary, train
from agent_rl.train_config import TrainConfig, load_train_config


def run(console: Console, config_path: str | Path, updates: int,
        latencies: list[str | None] | None = None,
        runs_dir: str | Path = "runs/bench_pipeline") -> dict[str, Any]:
    """Train `updates` updates async (max_lag 64) and sync from `config_path` under each env
    latency profile (None: the env's own speed); print the ratios."""
    base = load_train_config(config_path)
    profiles = []
    for latency in latencies or [None]:
        results = {mode: _train(console, base, mode, updates, latency,
                                Path(runs_dir) / _slug(latency) / mode)
                   for mode in ("async", "sync")}
        profiles.append(_profile(latency, results))
    table = Table("env latency", "mode", "updates", "train wall (s)", "updates/hour", "max lag",
                  "learner busy", "rollout decoding / env wait / idle",
                  "env wait / episode (s)")
    for profile in profiles:
        for mode in ("async", "sync"):
            row = profile[mode]
            table.add_row(profile["env_latency"] or "none", mode, str(row["updates"]),
                          f"{row['train_wall_s']:.1f}", f"{row['updates_per_hour']:.1f}",
                          str(row["lag_max"]), f"{row['learner_busy_share']:.0%}",
                          " / ".join(f"{share:.0%}" for share in row["rollout_time"].values()),
                          f"{row['env_wait_s_per_episode']:.1f}")
    console.print(table)
    for profile in profiles:
        console.print(f"env latency {profile['env_latency'] or 'none'}: async / sync updates per "
                      f"hour [bold]{profile['async_over_sync']:.2f}x[/bold]")
    return {"config": str(config_path), "updates": updates, "profiles": profiles}


def _train(console: Console, base: TrainConfig, mode: str, updates: int, latency: str | None,
           out_dir: Path) -> RunSummary:
    config = with_overrides(base, {
        "pipeline.max_lag": 64 if mode == "async" else 0,
        "pipeline.weight_sync_every": base.pipeline.weight_sync_every if mode == "async" else 1,
        "pipeline.num_updates": updates,
        "pipeline.checkpoint_every": 0,
        "pipeline.eval_every": 0,
        "env.step_latency": latency,
        "out_dir": str(out_dir),
        "resume": False,
    })
    console.log(f"training {updates} updates in {mode} mode, env latency {latency or 'none'}")
    return train(config)


def _profile(latency: str | None, results: dict[str, RunSummary]) -> dict[str, Any]:
    """One latency profile's pair of runs, with where their time went."""
    sync = results["sync"].updates_per_hour
    profile: dict[str, Any] = {
        "env_latency": latency,
        "async_over_sync": results["async"].updates_per_hour / sync if sync else float("nan"),
    }
    for mode, summary in results.items():
        records = read_metrics(summary.run_dir)
        learner_s = sum(r.get("perf/update_s", 0.0) for r in records)
        responses = sum(r.get("charts/responses", 0) for r in records) or 1
        env_wait = sum(r.get("perf/env_latency_s_mean", 0.0) * r.get("charts/responses", 0)
                       for r in records)
        profile[mode] = {
            "run_dir": str(summary.run_dir),
            "updates": summary.updates,
            "train_wall_s": summary.train_wall_s,
            "updates_per_hour": summary.updates_per_hour,
            "lag_max": summary.lag_max,
            "learner_busy_share": learner_s / summary.train_wall_s if summary.train_wall_s else 0,
            "env_wait_s_per_episode": env_wait / responses,
            # The rollout actors' time since their first group (see agent_rl/rollout/time_use.py).
            "rollout_time": {part: records[-1].get(f"rollout/{part}_share", 0.0) if records
                             else 0.0 for part in ("decoding", "env_wait", "idle")},
        }
    return profile


def latency_share(profile: dict[str, Any], baseline: dict[str, Any]) -> float:
    """The share of a synchronous update's time that is waiting on envs: what the profile
    added to the latency-free sync run's time per update. Sync runs do nothing while they
    wait, so this is what asynchrony can hide."""
    free = 3600 / baseline["sync"]["updates_per_hour"]
    slow = 3600 / profile["sync"]["updates_per_hour"]
    return max(0.0, 1 - free / slow)


def plot_ratio_vs_share(profiles: list[dict[str, Any]], path: Path) -> Path:
    """async/sync against the latency share, one point per profile; the latency-free profile
    (one is needed) is the baseline at share 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    baseline = next((p for p in profiles if p["env_latency"] is None), None)
    if baseline is None:
        raise ValueError("plotting async/sync against latency share needs a latency-free "
                         "profile (--env-latency none) as the baseline")
    points = sorted((latency_share(p, baseline), p["async_over_sync"], p["env_latency"] or "none")
                    for p in profiles)
    figure, axis = plt.subplots(figsize=(6, 3.5))
    shares, ratios, labels = zip(*points, strict=True)
    axis.plot([100 * s for s in shares], ratios, marker="o")
    for share, ratio, label in points:
        axis.annotate(label, (100 * share, ratio), textcoords="offset points", xytext=(4, -12),
                      fontsize=8)
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xlabel("env wait, % of a sync update's time")
    axis.set_ylabel("async / sync updates per hour")
    axis.set_title("asynchrony pays as env latency grows (measured)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _slug(latency: str | None) -> str:
    if latency is None:
        return "no-latency"
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in latency)
