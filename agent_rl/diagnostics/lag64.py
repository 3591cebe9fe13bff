"""The method's central comparison at lag 64: matched kernels against stock ones, as one command.

`run_lag64` (`agent-rl experiment lag64 CONFIG`, `make lag64`) trains three arms from one SFT
start with the same seed, tasks and settings, differing only in the kernels and the IS weights:

- `matched`: matched kernels, unclipped token-level IS (the method, CONFIG as written);
- `stock`: vLLM's and transformers' own kernels, unclipped token-level IS;
- `stock_tis`: stock kernels, IS weights truncated at 2 (`loss.clip: 2`, what most peers ship).

Each arm is a training run in `OUT/<arm>/` followed by the main job's held-out evaluation of its
last checkpoint in `OUT/<arm>/eval/`; the SFT start is evaluated once, in `OUT/eval-sft/`. Every
step leaves its files behind, so running the command again resumes an arm that stopped part-way
(from its last checkpoint) and skips what is done. After each arm the method's measures of every
arm finished so far go to `OUT/lag64_ablation.json` and `OUT/lag64_ablation.png`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_rl.diagnostics.plot import lag_histogram, lag_token_shares, reward_blocks
from agent_rl.errors import UserError

logger = logging.getLogger(__name__)

ARMS: dict[str, dict[str, Any]] = {
    "matched": {},
    "stock": {"matched_kernels": False},
    "stock_tis": {"matched_kernels": False, "loss.clip": 2.0},
}
MAIN_JOB_SFT = Path("runs/demo/sft")  # `make demo`'s SFT start; its `done` marks it finished
SFT_DONE = "done"
ABLATION_JSON = "lag64_ablation.json"
ABLATION_PNG = "lag64_ablation.png"
ARM_FILE = "arm.json"

OnStatus = Callable[[str], None]


class Lag64Error(UserError, ValueError):
    """The experiment cannot run as asked (an unknown arm, a missing SFT start)."""


def arm_overrides(arm: str) -> dict[str, Any]:
    """What an arm changes in CONFIG (dotted keys)."""
    if arm not in ARMS:
        raise Lag64Error(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}")
    return ARMS[arm]


def ensure_sft_start(sft: Path | None, out_dir: Path, sft_config: Path,
                     on_status: OnStatus) -> Path:
    """The one SFT start of every arm: `sft` when given; else the main job's (`runs/demo/sft`,
    once `make demo` finished it); else one made here from `sft_config` into `OUT/sft`."""
    if sft is not None:
        if not sft.exists():
            raise Lag64Error(f"--sft {sft} does not exist; give an `agent-rl sft` run dir or a "
                             "Hugging Face checkpoint folder, or leave it out to use the main "
                             "job's or make one")
        return sft
    if (MAIN_JOB_SFT / SFT_DONE).exists():
        return MAIN_JOB_SFT
    own = out_dir / "sft"
    if not (own / SFT_DONE).exists():
        from agent_rl.learn.sft import run_sft
        from agent_rl.learn.sft_config import load_sft_config

        on_status(f"no finished SFT at {MAIN_JOB_SFT}: training one from {sft_config} into {own}")
        run_sft(load_sft_config(sft_config, overrides={"out_dir": str(own)}))
        (own / SFT_DONE).touch()
    return own


def arm_config(config_path: Path, arm: str, overrides: dict[str, Any], out_dir: Path,
               sft: Path) -> Any:
    """The arm's run config: CONFIG, the caller's overrides, the arm's own, its folder and the
    common SFT start."""
    from agent_rl.train_config import load_train_config

    return load_train_config(config_path, overrides={
        **overrides, **arm_overrides(arm), "out_dir": str(out_dir / arm), "init_from": str(sft)})


def trained_updates(run_dir: Path) -> int:
    """The update of the run's newest checkpoint (0 without one)."""
    from agent_rl.learn.checkpoint import checkpoint_version, latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    return 0 if checkpoint is None else checkpoint_version(checkpoint)


def heldout_report(model: Path, out: Path, config: Any, on_status: OnStatus,
                   newer_than: Path | None = None) -> Any:
    """`model` evaluated by the run config's held-out protocol (its `evaluation:` section, in
    its dtype) into `out`, or the report already there (unless it is older than `newer_than`,
    a checkpoint trained since)."""
    from agent_rl.evaluate.config import eval_options
    from agent_rl.evaluate.report import load_report
    from agent_rl.evaluate.runner import evaluate

    report = out / "report.json"
    if report.exists() and (newer_than is None
                            or report.stat().st_mtime >= newer_than.stat().st_mtime):
        return load_report(out)
    on_status(f"evaluating {model} on held-out tasks into {out}")
    return evaluate(str(model), out_dir=out, **eval_options(config))


def run_lag64(config_path: Path, out_dir: Path = Path("runs/lag64"),
              arms: tuple[str, ...] = tuple(ARMS), overrides: dict[str, Any] | None = None,
              sft: Path | None = None, sft_config: Path = Path("configs/sft.yaml"),
              block: int = 16,
              on_status: OnStatus = logger.info,
              on_update: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train and evaluate each arm not done yet, then write the ablation's JSON and PNG;
    returns the JSON's content."""
    from agent_rl.learn.checkpoint import latest_checkpoint
    from agent_rl.orchestrate.launch import resolve_run_model
    from agent_rl.orchestrate.pipeline import train

    overrides = dict(overrides or {})
    for arm in arms:  # an unknown arm or a bad key fails before an SFT start is made
        arm_config(config_path, arm, overrides, out_dir, sft or MAIN_JOB_SFT)
    start = ensure_sft_start(sft, out_dir, sft_config, on_status)
    configs = {arm: arm_config(config_path, arm, overrides, out_dir, start) for arm in arms}
    any_config = next(iter(configs.values()))
    sft_report = heldout_report(start, out_dir / "eval-sft", any_config, on_status)
    for arm, config in configs.items():
        run_dir = Path(config.out_dir)
        done = trained_updates(run_dir)
        if done < config.pipeline.num_updates:
            on_status(f"arm {arm}: training from update {done} to "
                      f"{config.pipeline.num_updates} in {run_dir}")
            train(config, on_update=None if on_update is None else
                  (lambda metrics, arm=arm: on_update(arm, metrics)))
        report = heldout_report(run_dir, run_dir / "eval", config, on_status,
                                newer_than=latest_checkpoint(run_dir))
        figures = arm_figures(run_dir, config, report, sft_report, block)
        figures["weights_changed_share"] = weights_changed_share(
            resolve_run_model(config), latest_checkpoint(run_dir), config.dtype)
        (run_dir / ARM_FILE).write_text(json.dumps(figures, indent=1) + "\n")
        write_ablation(out_dir, start, sft_report, block)
    return json.loads((out_dir / ABLATION_JSON).read_text())


def weights_changed_share(start: Path, checkpoint: Path | None, dtype: str) -> float | None:
    """The share of weight entries that differ between the start, rounded to the arm's dtype as
    the arm loads it, and the arm's last checkpoint: how far the policy the actors run moved.

    In bf16 an Adam step of size lr changes an entry only once its fp32 master has moved half a
    bf16 step, so a small lr can train for many updates while the sampled policy stays put."""
    import torch
    from safetensors import safe_open

    from agent_rl.learn.hf_export import EXPORT_DIR

    if checkpoint is None:
        return None
    precision = getattr(torch, dtype)
    changed = total = 0
    with safe_open(str(start / "model.safetensors"), "pt") as before, \
            safe_open(str(checkpoint / EXPORT_DIR / "model.safetensors"), "pt") as after:
        for name in before.keys():
            old = before.get_tensor(name).to(precision)
            new = after.get_tensor(name).to(precision)
            changed += int((old != new).sum())
            total += old.numel()
    return changed / total


def arm_figures(run_dir: Path, config: Any, report: Any, sft_report: Any,
                block: int) -> dict[str, Any]:
    """The method's measures of one arm from its `metrics.jsonl` and held-out report."""
    from agent_rl.evaluate.passk import paired_macro_difference_ci
    from agent_rl.metrics import read_metrics

    records = [r for r in read_metrics(run_dir) if "charts/reward_mean" in r]
    difference = paired_macro_difference_ci(report.task_pass_at_1(), sft_report.task_pass_at_1(),
                                            num_resamples=config.evaluation.resamples,
                                            seed=0)
    ratios = [_finite(r.get("is/max_over_median")) for r in records]
    kl_blocks = kl_per_block(records, block)
    rewards = reward_blocks(records, block)
    shares = lag_token_shares(records)
    return {
        "arm": run_dir.name,
        "matched_kernels": config.matched_kernels,
        "loss_clip": config.loss.clip,
        "dtype": config.dtype,
        "max_lag": config.pipeline.max_lag,
        "weight_sync_every": config.pipeline.weight_sync_every,
        "updates": len(records),
        "lag_max": max((r.get("lag/max", 0) for r in records), default=0),
        **{f"share_tokens_lag_ge_{threshold}": share for threshold, share in shares.items()},
        "is_max_over_median": ratios,
        "is_max_over_median_peak": max((x for x in ratios if x is not None), default=None),
        "updates_is_max_over_median_over_2": sum(1 for x in ratios if x is not None and x > 2),
        "nonfinite_updates": sum(1 for r in records if _has_nonfinite(r)),
        "block": block,
        "kl_per_block": kl_blocks,
        "kl_last_over_first_block": (kl_blocks[-1] / kl_blocks[0]
                                     if len(kl_blocks) > 1 and kl_blocks[0] else None),
        "grad_norm_preclip_max": max((r["losses/grad_norm"] for r in records
                                      if _finite(r.get("losses/grad_norm")) is not None),
                                     default=None),
        "reward_per_block": [row["reward_mean"] for row in rewards],
        "task_reward_per_block": [row["task_reward_mean"] for row in rewards],
        "lag_hist": lag_histogram(records),
        "lag0_max_abs_log_max": max((r["is/lag0_max_abs_log"] for r in records
                                     if "is/lag0_max_abs_log" in r), default=None),
        "updates_with_lag0_tokens": sum(1 for r in records if r.get("is/lag0_tokens")),
        "heldout_macro_pass@1": report.macro_pass_at_1,
        "heldout_diff_vs_sft": 100 * difference.estimate,
        "heldout_ci95_vs_sft": [100 * difference.low, 100 * difference.high],
        "heldout_episodes": report.num_episodes,
    }


def kl_per_block(records: list[dict[str, Any]], block: int) -> list[float]:
    """Rollout-to-learner KL (k3) over consecutive blocks of `block` updates, each token once."""
    means = []
    for start in range(0, len(records), block):
        chunk = [r for r in records[start:start + block] if _finite(r.get("is/kl_k3")) is not None]
        tokens = sum(r.get("is/tokens", 1) for r in chunk)
        if chunk and tokens:
            means.append(sum(r["is/kl_k3"] * r.get("is/tokens", 1) for r in chunk) / tokens)
    return means


def write_ablation(out_dir: Path, sft: Path, sft_report: Any, block: int) -> Path:
    """`lag64_ablation.json` and `.png` from every arm finished so far (its `arm.json`)."""
    arms = {arm: json.loads((out_dir / arm / ARM_FILE).read_text())
            for arm in ARMS if (out_dir / arm / ARM_FILE).exists()}
    path = out_dir / ABLATION_JSON
    path.write_text(json.dumps({
        "sft": {"start": str(sft), "heldout_macro_pass@1": sft_report.macro_pass_at_1,
                "heldout_episodes": sft_report.num_episodes},
        # the held-out engine's dtype (agent_rl.evaluate's), the same for the start and the arms
        "heldout_dtype": sft_report.settings.get("dtype"),
        "block": block,
        "arms": arms,
    }, indent=1) + "\n")
    plot_ablation(arms, out_dir / ABLATION_PNG)
    return path


def plot_ablation(arms: dict[str, dict[str, Any]], path: Path) -> Path:
    """The arms side by side: IS max/median per update (log scale), rollout-to-learner KL per
    update block, training reward per block."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (weights, kl, reward) = plt.subplots(1, 3, figsize=(15, 4))
    for arm, figures in arms.items():
        ratios = [(step, x) for step, x in enumerate(figures["is_max_over_median"], start=1)
                  if x is not None]
        if ratios:
            weights.plot(*zip(*ratios, strict=True), label=arm)
        for axis, key in ((kl, "kl_per_block"), (reward, "reward_per_block")):
            ends = [min(figures["block"] * (i + 1), figures["updates"])
                    for i in range(len(figures[key]))]
            axis.plot(ends, figures[key], marker="o", label=arm)
    weights.set_yscale("log")
    weights.set_title("IS weight max / median, per update")
    kl.set_yscale("log")
    kl.set_title("rollout-to-learner KL (k3), per block")
    reward.set_title("training reward, per block")
    for axis in (weights, kl, reward):
        axis.set_xlabel("update")
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _has_nonfinite(record: dict[str, Any]) -> bool:
    keys = ("losses/loss", "losses/grad_norm", "is/max", "is/median", "is/kl_k3")
    return any(isinstance(record.get(k), float) and not math.isfinite(record[k]) for k in keys)
