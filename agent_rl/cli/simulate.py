"""`agent-rl simulate`: predict a run's updates/hour and lag, async against sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agent_rl.config import ConfigError

console = Console()


def simulate_command(
    config_path: Annotated[Path, typer.Argument(help="The run config to simulate.")],
    calibrate: Annotated[Path | None, typer.Option(
        help="Take the costs from this finished run (a sync run measures rollout speed "
        "exactly).")] = None,
    costs_file: Annotated[Path | None, typer.Option(
        "--costs", help="Take the costs from this YAML file (fields of `Costs`).")] = None,
    cost: Annotated[list[str] | None, typer.Option(
        "--cost", help="Override one cost: --cost env_step_s=2.5")] = None,
    rollout_devices: Annotated[int | None, typer.Option(
        help="Rollout devices (actors); default: the config's.")] = None,
    learner_devices: Annotated[int, typer.Option(help="Learner devices.")] = 1,
    updates: Annotated[int | None, typer.Option(help="Updates to simulate.")] = None,
    seeds: Annotated[int, typer.Option(
        min=1, help="Simulate each mode this many times; the median is shown with the "
        "range.")] = 8,
    check: Annotated[list[Path] | None, typer.Option(
        help="A measured run to set the prediction against (its mode's).")] = None,
    expect: Annotated[list[str] | None, typer.Option(
        help="A published figure to set the prediction against: --expect sync=72.8 "
        "(updates/hour).")] = None,
    sweep_devices: Annotated[str | None, typer.Option(
        help="Also predict async/sync for these rollout device counts: 1,2,4,8")] = None,
    sweep_latency: Annotated[str | None, typer.Option(
        help="... and these env step latencies in seconds: 0,1,10")] = None,
    out: Annotated[Path | None, typer.Option(help="Write simulate.json (and the sweep's PNG) "
                                               "here.")] = None,
) -> None:
    """A discrete-event model of the pipeline, run by the orchestration's own scheduler, with
    measured costs: updates/hour, lag and where rollout time goes, async against sync."""
    from agent_rl.config import load_config, parse_key_values, validate_config
    from agent_rl.simulate.costs import Costs, costs_from_run
    from agent_rl.simulate.predict import check as check_runs
    from agent_rl.simulate.predict import check_row, plot_sweep, predict, ratio, sweep
    from agent_rl.train_config import load_train_config

    config = load_train_config(config_path)
    if (calibrate is None) == (costs_file is None):
        raise ConfigError("give the costs with exactly one of --calibrate RUN_DIR or --costs "
                          "FILE")
    costs = costs_from_run(calibrate) if calibrate else load_config(costs_file, Costs)
    if cost:
        data = {**costs.model_dump(), **parse_key_values(cost, "--cost")}
        costs = validate_config(data, Costs, source="--cost")
    results = predict(config, costs, rollout_devices, learner_devices, updates, seeds)
    table = Table("mode", "updates", "updates/hour", f"range ({seeds} seeds)", "max lag",
                  "decoding", "env wait", "loading", "idle", "learner busy",
                  title=f"simulated {config_path} (the median seed's run)")
    for mode, result in results.items():
        shares = result.time_shares
        low, high = result.spread or (result.updates_per_hour,) * 2
        table.add_row(mode, str(result.updates), f"{result.updates_per_hour:.1f}",
                      f"{low:.1f}-{high:.1f}",
                      str(result.lag_max), *(f"{shares[k]:.0%}" for k in shares),
                      f"{result.learner_busy_share:.0%}")
    console.print(table)
    console.print(f"async/sync: [bold]{ratio(results):.2f}x[/bold]")
    report: dict = {
        "config": str(config_path), "costs": costs.model_dump(),
        "rollout_devices": rollout_devices or config.pipeline.num_rollout_actors,
        "learner_devices": learner_devices,
        "seeds": seeds,
        "predicted": {mode: {"updates_per_hour": r.updates_per_hour,
                             "updates_per_hour_range": list(r.spread or ()),
                             "lag_max": r.lag_max,
                             "lag_counts": r.lag_counts, "time_shares": r.time_shares,
                             "learner_busy_share": r.learner_busy_share}
                      for mode, r in results.items()},
        "async_over_sync": ratio(results),
    }
    if check or expect:
        report["check"] = check_runs(results, check or [])
        for mode, value in parse_key_values(expect or [], "--expect").items():
            if mode not in results:
                raise ConfigError(f"--expect {mode}=...: the modes are async and sync")
            report["check"].append(check_row(results, mode, float(value), "--expect"))
        for row in report["check"]:
            given = "expected" if row["run"] == "--expect" else "measured"
            low, high = row["predicted_range"]
            spread = (f"; seeds' range {low:.1f}-{high:.1f}, "
                      f"{'inside' if row['within_range'] else 'outside'}" if high > low else "")
            console.print(f"{row['mode']}: {given} {row['measured_updates_per_hour']:.1f} "
                          f"updates/hour, predicted {row['predicted_updates_per_hour']:.1f} "
                          f"({row['error']:+.0%}{spread}) [{row['run']}]")
            if measured := row.get("measured_time_shares"):
                predicted = row["predicted_time_shares"]
                console.print("  rollout time, measured vs predicted: " + ", ".join(
                    f"{part.replace('_', ' ')} {share:.0%} vs {predicted.get(part, 0):.0%}"
                    for part, share in measured.items()))
    if sweep_devices or sweep_latency:
        devices = [int(x) for x in (sweep_devices or str(report["rollout_devices"])).split(",")]
        latencies = [float(x) for x in (sweep_latency or str(costs.env_step_s)).split(",")]
        report["sweep"] = sweep(config, costs, devices, latencies, learner_devices, updates,
                                seeds)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "simulate.json").write_text(json.dumps(report, indent=2) + "\n")
        if "sweep" in report:
            console.print(f"sweep plot: {plot_sweep(report['sweep'], out / 'simulate_sweep.png')}")
        console.print(f"wrote {out / 'simulate.json'}")
