"""PNG curves of a run from its `metrics.jsonl`: the charts that tell a healthy run from a sick one.

Reward should rise; the IS max/median ratio and the rollout-to-learner KL should stay flat (they
grow without bound when rollout and learner kernels disagree); the pre-clip gradient norm should
not spike; the lag should stay under max_lag.
"""

from __future__ import annotations

from pathlib import Path

from agent_rl.metrics import read_metrics

CHARTS: dict[str, tuple[str, list[str]]] = {
    "reward": ("mean reward", ["charts/reward_mean", "eval/reward_mean"]),
    "importance_weights": ("importance weights", ["is/max", "is/median", "is/mean"]),
    "kl": ("rollout-to-learner KL (k3)", ["is/kl_k3"]),
    "grad_norm": ("pre-clip gradient norm", ["losses/grad_norm"]),
    "lag": ("policy lag (updates)", ["lag/mean", "lag/max"]),
}


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
            axis.plot(steps, values, label=key, marker="." if len(points) < 50 else None)
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
