"""`agent-rl experiment lag64` on the tiny model: three arms, two updates each, the ablation's
JSON in the shape the issue asks for, and a second run that skips everything already done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_rl.cli.main import _register_optional_commands, app
from agent_rl.diagnostics.lag64 import ARM_FILE, Lag64Error, ensure_sft_start, run_lag64

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "lag64.yaml"
REQUIRED = ("updates", "lag_max", "share_tokens_lag_ge_32", "is_max_over_median_peak",
            "kl_last_over_first_block", "grad_norm_preclip_max", "heldout_macro_pass@1",
            "heldout_ci95_vs_sft")
TINY = ["model=tiny", "env.kwargs={categories: [arithmetic], max_turns: 2}",
        "rollout.group_size=2", "rollout.max_tokens_per_turn=16", "engine.max_model_len=512",
        "engine.kv_cache_gib=0.25", "engine.cpu_cores=auto", "learner.lr=1.0e-4",
        "learner.warmup_updates=0", "pipeline.num_updates=2", "pipeline.weight_sync_every=2",
        "pipeline.groups_in_flight_per_actor=2", "pipeline.stall_timeout_s=300",
        "pipeline.dynamic_sampling=false"]  # the random tiny model's groups are all flat


def invoke(out: Path, sft: Path) -> str:
    _register_optional_commands()
    options = ["--out", str(out), "--sft", str(sft), "--block", "1",
               "--set", "evaluation.limit_per_category=1", "--set", "evaluation.concurrency=4"]
    for item in TINY:
        options += ["--set", item]
    result = CliRunner().invoke(app, ["experiment", "lag64", str(CONFIG), *options])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


@pytest.mark.slow
def test_the_lag64_experiment_writes_every_arms_measures_and_resumes(
        local_ray, tmp_path: Path, tiny_model: Path) -> None:
    out = tmp_path / "lag64"
    invoke(out, tiny_model)
    ablation = json.loads((out / "lag64_ablation.json").read_text())
    assert set(ablation["arms"]) == {"matched", "stock", "stock_tis"}
    for arm, figures in ablation["arms"].items():
        assert set(REQUIRED) <= set(figures), arm
        assert figures["updates"] == 2 and figures["dtype"] == "bfloat16"
        low, high = figures["heldout_ci95_vs_sft"]
        assert low <= figures["heldout_diff_vs_sft"] <= high
        assert len(figures["is_max_over_median"]) == 2 and figures["lag_hist"]
        assert 0.0 <= figures["weights_changed_share"] <= 1.0
    arms = ablation["arms"]
    assert arms["matched"]["matched_kernels"] and not arms["stock"]["matched_kernels"]
    assert arms["stock_tis"]["loss_clip"] == 2.0 and arms["stock"]["loss_clip"] is None
    assert arms["matched"]["lag0_max_abs_log_max"] in (None, 0.0)
    assert (out / "lag64_ablation.png").stat().st_size > 0

    trained = {arm: (out / arm / "metrics.jsonl").stat().st_mtime for arm in arms}
    evaluated = (out / "eval-sft" / "report.json").stat().st_mtime
    output = invoke(out, tiny_model)
    assert "training" not in output and "evaluating" not in output
    assert {arm: (out / arm / "metrics.jsonl").stat().st_mtime for arm in arms} == trained
    assert (out / "eval-sft" / "report.json").stat().st_mtime == evaluated
    assert all((out / arm / ARM_FILE).exists() for arm in arms)


def test_an_unknown_arm_fails_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(Lag64Error, match="unknown arm 'fast'.*matched, stock, stock_tis"):
        run_lag64(CONFIG, tmp_path, arms=("matched", "fast"))
    assert not tmp_path.joinpath("sft").exists()


def test_without_a_finished_main_job_sft_the_command_makes_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = []

    def fake_sft(config) -> None:  # the real one trains for minutes
        made.append(config.out_dir)
        config.out_dir.mkdir(parents=True)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("agent_rl.learn.sft.run_sft", fake_sft)
    sft_config = Path(__file__).resolve().parents[2] / "configs" / "sft.yaml"
    start = ensure_sft_start(None, Path("runs/lag64"), sft_config, lambda text: None)
    assert start == Path("runs/lag64/sft") and made == [start] and (start / "done").exists()
    assert ensure_sft_start(None, Path("runs/lag64"), sft_config, lambda text: None) == start
    assert len(made) == 1  # done: not made again
    Path("runs/demo/sft").mkdir(parents=True)
    Path("runs/demo/sft/done").touch()
    assert ensure_sft_start(None, Path("runs/lag64"), sft_config, print) == Path("runs/demo/sft")
