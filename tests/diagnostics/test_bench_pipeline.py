"""`agent-rl bench pipeline` with env latency profiles, and the simulator calibrated on its
latency-free sync run: the chain the README's asynchrony figures come from, on the tiny model."""

from __future__ import annotations

import json

import pytest
import yaml
from rich.console import Console

from agent_rl.benchmarks import pipeline_bench
from agent_rl.simulate.costs import costs_from_run
from agent_rl.simulate.predict import check, predict
from agent_rl.train_config import load_train_config

CONFIG = {
    "model": "tiny",
    "seed": 5,
    "env": {"id": "agent_rl/Parity-v0"},
    "rollout": {"group_size": 2, "max_tokens_per_turn": 8},
    "engine": {"max_model_len": 256, "kv_cache_gib": 0.25},
    "pipeline": {"groups_per_update": 1, "groups_in_flight_per_actor": 2,
                 "stall_timeout_s": 300.0},
}


@pytest.mark.slow
def test_latency_profiles_run_in_pairs_and_calibrate_the_simulator(local_ray, tmp_path):
    config_path = tmp_path / "bench.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    report = pipeline_bench.run(Console(quiet=True), config_path, updates=2,
                                latencies=[None, "fixed:0.2"], runs_dir=tmp_path / "runs")
    plain, slow = report["profiles"]
    assert (plain["env_latency"], slow["env_latency"]) == (None, "fixed:0.2")
    for profile in (plain, slow):
        assert profile["async_over_sync"] > 0
        for mode in ("async", "sync"):
            summary = json.loads((tmp_path / "runs" / _slug(profile) / mode /
                                  "summary.json").read_text())
            assert summary["mode"] == mode and summary["updates"] == 2
    assert plain["sync"]["env_wait_s_per_episode"] == 0.0
    assert slow["sync"]["env_wait_s_per_episode"] == pytest.approx(0.2)  # one step an episode
    for profile in (plain, slow):  # where the rollout's time went: the shares make the whole
        for mode in ("async", "sync"):
            assert sum(profile[mode]["rollout_time"].values()) == pytest.approx(1.0)
    assert slow["sync"]["rollout_time"]["env_wait"] > 0
    png = pipeline_bench.plot_ratio_vs_share(report["profiles"], tmp_path / "ratio.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    costs = costs_from_run(plain["sync"]["run_dir"])
    predictions = predict(load_train_config(config_path), costs, updates=2)
    rows = check(predictions, [plain["sync"]["run_dir"], plain["async"]["run_dir"]])
    assert {row["mode"] for row in rows} == {"sync", "async"}
    assert all(row["predicted_updates_per_hour"] > 0 for row in rows)
    assert all(set(row["measured_time_shares"]) <= set(row["predicted_time_shares"])
               for row in rows)


def _profile(latency: str | None, sync_per_hour: float, ratio: float) -> dict:
    return {"env_latency": latency, "async_over_sync": ratio,
            "sync": {"updates_per_hour": sync_per_hour},
            "async": {"updates_per_hour": sync_per_hour * ratio}}


def test_latency_share_is_the_wait_a_sync_update_gained(tmp_path):
    free = _profile(None, 100.0, 1.1)  # 36 s per sync update
    slow = _profile("fixed:10", 25.0, 2.5)  # 144 s: 108 s of it waiting
    assert pipeline_bench.latency_share(slow, free) == pytest.approx(0.75)
    assert pipeline_bench.latency_share(free, free) == 0.0
    assert pipeline_bench.plot_ratio_vs_share([slow, free], tmp_path / "r.png").exists()
    with pytest.raises(ValueError, match="latency-free profile"):
        pipeline_bench.plot_ratio_vs_share([slow], tmp_path / "r.png")


def test_the_plot_command_gathers_profiles_of_several_runs_into_one_file(tmp_path):
    """The committed figure's JSON holds every profile measured, each with its ratio and
    latency share, though they came from separate `bench pipeline` runs."""
    from typer.testing import CliRunner

    from agent_rl.cli.main import app

    files = []
    for name, profile in (("free", _profile(None, 100.0, 1.1)),
                          ("slow", _profile("fixed:10", 25.0, 2.5))):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps({"updates": 12, "profiles": [profile]}))
    merged = tmp_path / "all.json"
    result = CliRunner().invoke(app, ["bench", "pipeline-plot", *map(str, files), "--out",
                                      str(tmp_path / "r.png"), "--json-out", str(merged)])
    assert result.exit_code == 0, result.output
    profiles = json.loads(merged.read_text())["profiles"]
    assert [(p["env_latency"], p["async_over_sync"]) for p in profiles] == [(None, 1.1),
                                                                           ("fixed:10", 2.5)]
    assert profiles[1]["latency_share"] == pytest.approx(0.75)


def _slug(profile: dict) -> str:
    return "no-latency" if profile["env_latency"] is None else "fixed_0.2"
