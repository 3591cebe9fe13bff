"""`agent-rl soak`: run the tiny-model pipeline for minutes with random faults switched on.

Every `fault_every_s` seconds the driver injects a random fault (kill a rollout actor mid-episode,
delay a weight broadcast, fill the queue, kill the learner); the rollout envs meanwhile raise,
hang, lose their sandbox or get malformed output every few steps. A killed learner is resumed
from its last checkpoint, as a user would by running `agent-rl train` again. The report says
what was injected and recovered, how many episodes were lost and why, and whether the ledger
balances (every generated group trained once or dropped with a reason); it is written as
`soak_report.json` in the soak's run dir.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agent_rl.config import with_overrides
from agent_rl.fault_config import FaultConfig
from agent_rl.orchestrate.faults import DRIVER_FAULTS, KILL_LEARNER, LearnerKilled
from agent_rl.orchestrate.ledger import read_ledger
from agent_rl.train_config import TrainConfig, load_train_config

logger = logging.getLogger(__name__)

REPORT_FILE = "soak_report.json"
MIN_ATTEMPT_S = 60.0  # a resume needs about this long to start its engines and do anything


def soak_config(
    config_path: str | Path, run_dir: Path, fault_every_s: float, seconds: float, seed: int = 0
) -> TrainConfig:
    """The run config with faults on, updates unbounded, and a wall-clock limit instead."""
    base = load_train_config(config_path)
    faults = FaultConfig(
        random_every_s=fault_every_s,
        random_faults=list(DRIVER_FAULTS),
        random_delay_s=min(5.0, fault_every_s / 2),
        # Primes, so the env faults drift across turns and episodes instead of lining up.
        malformed_output_every=7,
        sandbox_kill_every=19,
        sandbox_hang_every=23,
        env_raise_every=29,
        seed=seed,
    )
    return with_overrides(base, {
        # The env faults (sandbox kills and hangs) need the Python tool env.
        "env.id": "agent_rl/PythonTool-v0",
        "env.kwargs.categories": base.env.kwargs.get("categories") or ["arithmetic"],
        "env.sandbox_timeout_s": 2.0,
        "out_dir": run_dir,
        "resume": True,
        "pipeline.num_updates": 1_000_000,
        "pipeline.max_wall_s": seconds,
        "pipeline.checkpoint_every": 2,  # a killed learner loses at most two updates
        "faults": faults.model_dump(),
    })


def run(
    console: Console,
    minutes: float,
    fault_every_s: float = 30,
    config_path: str | Path = "configs/smoke.yaml",
    out_dir: str | Path = Path("runs/soak"),
) -> dict[str, Any]:
    """Soak the pipeline for `minutes` with a random fault every `fault_every_s` seconds."""
    from agent_rl.orchestrate.pipeline import train

    run_dir = Path(out_dir) / time.strftime("soak-%Y%m%d-%H%M%S")
    deadline = time.monotonic() + 60.0 * minutes
    attempts: list[dict[str, Any]] = []
    while True:
        seconds = max(1.0, deadline - time.monotonic())
        config = soak_config(config_path, run_dir, fault_every_s, seconds, seed=len(attempts))
        console.print(f"soak attempt {len(attempts) + 1}: {seconds:.0f} s left, run dir {run_dir}")
        try:
            summary = train(config)
        except LearnerKilled as error:
            console.print(f"[yellow]learner killed[/yellow]: {error}")
            attempts.append(_attempt(run_dir, killed=True))
            if deadline - time.monotonic() < MIN_ATTEMPT_S:
                console.print("too little time left to resume; the soak ends here")
                break
            continue
        attempts.append(_attempt(run_dir, killed=False, resumed_from=summary.resumed_from))
        break
    report = _report(run_dir, attempts, minutes, fault_every_s)
    (run_dir / REPORT_FILE).write_text(json.dumps(report, indent=1))
    _print_report(console, report, run_dir)
    return report


def _attempt(run_dir: Path, killed: bool, resumed_from: int | None = None) -> dict[str, Any]:
    """One train() call's account, from the ledger it left behind."""
    ledger = read_ledger(run_dir)
    attempt = {"killed": killed, "version": ledger["version"], "faults": ledger["faults"],
               "resumed_from": resumed_from, "generated_since_checkpoint": 0}
    if killed:
        checkpoints = sorted((run_dir / "checkpoints").glob("update_*"))
        kept = set()
        if checkpoints:
            state = json.loads((checkpoints[-1] / "run_state.json").read_text())
            kept = set(state["ledger"]["generated"])
        attempt["generated_since_checkpoint"] = len(set(ledger["generated"]) - kept)
    return attempt


def _report(
    run_dir: Path, attempts: list[dict[str, Any]], minutes: float, fault_every_s: float
) -> dict[str, Any]:
    injected: dict[str, int] = {}
    recovered: dict[str, int] = {}
    for attempt in attempts:
        for kind, count in attempt["faults"]["injected"].items():
            injected[kind] = injected.get(kind, 0) + count
        for kind, count in attempt["faults"]["recovered"].items():
            recovered[kind] = recovered.get(kind, 0) + count
    kills = sum(attempt["killed"] for attempt in attempts)
    if kills:
        # A killed learner counts as recovered when the next attempt resumed and ran.
        recovered[KILL_LEARNER] = kills - int(attempts[-1]["killed"])
    final = read_ledger(run_dir)
    counts = final["counts"]
    # Re-run already, or waiting to be re-run when the run stopped.
    reruns = [*final["rerun"].values(), *final["to_rerun"].values()]
    group_size = _group_size(run_dir)
    lost_groups = {
        "actor_died": reruns.count("actor_died"),
        "env_error": counts["dropped_by_reason"].get("env_error", 0),
        "learner_killed": sum(attempt["generated_since_checkpoint"] for attempt in attempts),
    }
    # A soak that ends on a learner kill still holds generated groups in its queue.
    trained_twice = len(final["trained"]) - len(set(final["trained"]))
    balanced = (
        counts["generated"] == counts["trained"] + counts["dropped"] + len(final["queued"])
        and trained_twice == 0
        and not set(final["trained"]) & set(final["dropped"])
    )
    return {
        "run_dir": str(run_dir),
        "minutes": minutes,
        "fault_every_s": fault_every_s,
        "attempts": len(attempts),
        "updates": final["version"],
        "status": final["status"],
        "faults_injected": injected,
        "faults_recovered": recovered,
        "actor_restarts": sum(attempt["faults"]["actor_restarts"] for attempt in attempts),
        "groups_lost": lost_groups,
        "episodes_lost": {reason: n * group_size for reason, n in lost_groups.items()},
        "ledger": counts,
        "queued_at_end": len(final["queued"]),
        "groups_trained_twice": trained_twice,
        "ledger_balanced": balanced,
    }


def _group_size(run_dir: Path) -> int:
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return int(config["rollout"]["group_size"])


def _print_report(console: Console, report: dict[str, Any], run_dir: Path) -> None:
    table = Table("fault", "injected", "recovered")
    for kind in sorted(report["faults_injected"]):
        table.add_row(kind, str(report["faults_injected"][kind]),
                      str(report["faults_recovered"].get(kind, 0)))
    console.print(table)
    console.print(f"updates: {report['updates']}  attempts: {report['attempts']}  "
                  f"actor restarts: {report['actor_restarts']}")
    console.print(f"episodes lost: {report['episodes_lost']}")
    verdict = "[green]balanced[/green]" if report["ledger_balanced"] else "[red]NOT balanced[/red]"
    console.print(f"ledger {verdict}: {report['ledger']}, queued at the end: "
                  f"{report['queued_at_end']}, trained twice: {report['groups_trained_twice']}")
    console.print(f"report: {run_dir / REPORT_FILE}")
