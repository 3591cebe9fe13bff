"""PNG curves of a run from its `metrics.jsonl`: the charts that tell a healthy run from a sick one.

Reward should rise; the IS max/median ratio and the rollout-to-learner KL should stay flat (they
grow without bound when rollout and learner kernels disagree); the pre-clip gradient norm should
not spike; the lag should stay under max_lag (its course over the run, and the share of
tokens far behind, are charted too).
"""

from __future__ import annotations

from pathlib import Path

from agent_rl.metrics import read_metrics

CHARTS: dict[str, tuple[str, list[str]]] = {
    "reward": ("mean reward", ["charts/reward_mean", "eval/reward_mean"]),
    "importance_weights": ("importance weights", ["is/max", "is/median", "is/mean"]),
    "tool_use": ("tool use per episode", ["charts/tool_calls_mean", "charts/tool_use_share"]),
    "kl": ("rollout-to-learner KL (k3)", ["is/kl_k3"]),
    "kernel_mismatch": ("|log IS weight| of lag-0 tokens (kernel mismatch alone)",
                        ["is/lag0_max_abs_log"]),
    "grad_norm": ("pre-clip gradient norm", ["losses/grad_norm"]),
    "lag": ("policy lag (updates)", ["lag/mean", "lag/max"]),
    "lag_share": ("share of trained tokens at lag >= 16, 32, 48",
                  ["lag/share_ge_16", "lag/share_ge_32", "lag/share_ge_48"]),
}


SMOOTH_WINDOW = 10  # updates in the reward chart's running mean


def reward_blocks(records: list[dict], block: int) -> list[dict]:
    """Reward over consecutive blocks of `block` updates, each response weighted once, with the
    block's flat groups and its worst IS weights and lag.

    One update's own reward is noisy (a few groups); a block mean is what says whether training
    raised the reward. Dynamic sampling's flat groups are in `charts/responses` too, so a block
    covers every response generated in it. The IS and lag columns say whether the rise came
    with bounded corrections. `task_reward_mean` adds back what a format penalty
    (`charts/format_penalty_mean`) took: the task's own reward, which evaluation scores.
    """
    rows = []
    for start in range(0, len(records), block):
        chunk = [r for r in records[start:start + block] if "charts/reward_mean" in r]
        responses = sum(r.get("charts/responses", 1) for r in chunk)
        if not chunk or not responses:
            continue
        total = sum(r["charts/reward_mean"] * r.get("charts/responses", 1) for r in chunk)
        charged = sum(r.get("charts/format_penalty_mean", 0.0) * r.get("charts/responses", 1)
                      for r in chunk)
        rows.append({
            "first": chunk[0]["step"], "last": chunk[-1]["step"], "responses": responses,
            "reward_mean": total / responses,
            "task_reward_mean": (total + charged) / responses,
            "groups": sum(r.get("charts/groups", 0) for r in chunk),
            "flat_groups": sum(r.get("charts/zero_variance_groups", 0) for r in chunk),
            "is_max": max((r["is/max"] for r in chunk if "is/max" in r), default=None),
            "is_max_over_median": max(
                (r["is/max_over_median"] for r in chunk if "is/max_over_median" in r),
                default=None),
            "lag_max": max((r["lag/max"] for r in chunk if "lag/max" in r), default=None),
        })
    return rows


def lag_token_shares(records: list[dict], thresholds: tuple[int, ...] = (16, 32, 48)
                     ) -> dict[str, float | None]:
    """The share of all trained tokens of the run at lag >= each threshold, from the updates'
    `lag/hist` (token counts per lag): `{"16": 0.4, ...}`; None for a run without one."""
    counts = {int(lag): count for lag, count in lag_histogram(records).items()}
    total = sum(counts.values())
    return {str(threshold): (sum(c for lag, c in counts.items() if lag >= threshold) / total
                             if total else None) for threshold in thresholds}


def lag_histogram(records: list[dict]) -> dict[str, int]:
    """Trained tokens per lag over the whole run (the updates' `lag/hist` summed)."""
    counts: dict[int, int] = {}
    for record in records:
        for lag, count in (record.get("lag/hist") or {}).items():
            counts[int(lag)] = counts.get(int(lag), 0) + count
    return {str(lag): counts[lag] for lag in sorted(counts)}


def _response_weighted_reward(records: list[dict]) -> float | None:
    responses = sum(r.get("charts/responses", 1) for r in records)
    total = sum(r["charts/reward_mean"] * r.get("charts/responses", 1) for r in records)
    return total / responses if responses else None


def _peak(records: list[dict], key: str) -> float | None:
    return max((r[key] for r in records if key in r), default=None)


def learning_summary(records: list[dict], block: int) -> dict:
    """The learning run's figures: training reward over the first and last fifth of updates (the
    issue's ratio), the IS weight max/median at its worst, and lag, KL and the kernel term at
    theirs, beside the reward per block; `agent-rl plot` writes it as `plots/blocks.json`."""
    updates = [r for r in records if "charts/reward_mean" in r]
    fifth = max(1, len(updates) // 5)
    first = _response_weighted_reward(updates[:fifth])
    last = _response_weighted_reward(updates[-fifth:])
    ratios = sorted(r["is/max_over_median"] for r in updates if "is/max_over_median" in r)
    blocks = reward_blocks(records, block)
    return {
        "updates": len(updates),
        "block": fifth,
        "reward_first20": first,
        "reward_last20": last,
        "ratio": last / first if first and last is not None else None,
        "is_max_over_median_max": ratios[-1] if ratios else None,
        "is_max_over_median_median": ratios[len(ratios) // 2] if ratios else None,
        "updates_is_over_1.5": sum(1 for ratio in ratios if ratio > 1.5),
        "lag_max": _peak(updates, "lag/max"),
        **{f"share_tokens_lag_ge_{threshold}": share
           for threshold, share in lag_token_shares(updates).items()},
        "kl_k3_max": _peak(updates, "is/kl_k3"),
        "lag0_max_abs_log_max": _peak(updates, "is/lag0_max_abs_log"),
        "updates_with_lag0_tokens": sum(1 for r in updates if r.get("is/lag0_tokens")),
        "tool_use_share_first20": _mean(updates[:fifth], "charts/tool_use_share"),
        "tool_use_share_last20": _mean(updates[-fifth:], "charts/tool_use_share"),
        "reward_per_block": [round(row["reward_mean"], 3) for row in blocks],
        "task_reward_per_block": [round(row["task_reward_mean"], 3) for row in blocks],
    }


def _mean(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values) if values else None


def _running_mean(points: list[tuple[int, float]], weights: list[float], window: int
                  ) -> list[tuple[int, float]]:
    out = []
    for i in range(len(points)):
        lo = max(0, i - window + 1)
        weight = sum(weights[lo:i + 1])
        value = sum(p[1] * w for p, w in zip(points[lo:i + 1], weights[lo:i + 1], strict=True))
        out.append((points[i][0], value / weight if weight else 0.0))
    return out


def plot_run(run_dir: Path) -> list[Path]:
    """Write one PNG per chart under `run_dir/plots`; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    if not records:
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl records to plot; train first")
    out_dir = run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (title, keys) in CHARTS.items():
        series = {
            key: [(r["step"], r[key]) for r in records if isinstance(r.get(key), int | float)]
            for key in keys
        }
        series = {key: points for key, points in series.items() if points}
        if not series:
            continue
        figure, axis = plt.subplots(figsize=(6, 3.5))
        for key, points in series.items():
            steps, values = zip(*points, strict=True)
            smooth = key == "charts/reward_mean" and len(points) >= 2 * SMOOTH_WINDOW
            axis.plot(steps, values, label=key, marker="." if len(points) < 50 else None,
                      alpha=0.35 if smooth else 1.0)
            if smooth:
                weights = [float(r.get("charts/responses", 1)) for r in records
                           if isinstance(r.get(key), int | float)]
                steps, values = zip(*_running_mean(points, weights, SMOOTH_WINDOW), strict=True)
                axis.plot(steps, values, label=f"running mean ({SMOOTH_WINDOW} updates)")
        axis.set_title(title)
        axis.set_xlabel("update")
        axis.legend()
        axis.grid(alpha=0.3)
        figure.tight_layout()
        path = out_dir / f"{name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written
