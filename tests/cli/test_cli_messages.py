"""What a user sees in the first hour: one line for a typo (blamed on where it was made), a
finished run that says so at once, a resumed run that says where it resumes, and metrics written
once per update across resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_rl.cli.main import app
from agent_rl.config import ConfigError
from agent_rl.metrics import MetricsWriter
from agent_rl.model_store import ModelNotFoundError
from agent_rl.train_config import load_train_config

runner = CliRunner()
SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml"


def test_a_set_typo_is_blamed_on_set_and_names_the_nearest_key() -> None:
    with pytest.raises(ConfigError, match=r"--set pipeline.num_update: unknown key .*"
                       r"'num_updates'"):
        load_train_config(SMOKE, overrides={"pipeline.num_update": 3})
    with pytest.raises(ConfigError, match=r"--set num_update: unknown key .*"
                       r"'pipeline.num_updates'"):
        load_train_config(SMOKE, overrides={"num_update": 3})


def test_a_yaml_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_lag: [\n")
    with pytest.raises(ConfigError, match=f'in "{bad}", line 2'):
        load_train_config(bad)


def test_a_finished_run_says_so_and_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "update_000006").mkdir(parents=True)
    result = runner.invoke(app, ["train", str(SMOKE), "--set", f"out_dir={tmp_path}"],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "has already finished: update 6 of 6" in " ".join(result.output.split())


def test_a_missing_model_is_a_user_error_and_leaves_no_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(SMOKE), "--set", f"out_dir={out}",
                                 "--set", f"model={tmp_path / 'nowhere'}"], terminal_width=200)
    assert isinstance(result.exception, ModelNotFoundError)  # main() prints it as one line
    assert not out.exists()


def test_metrics_of_updates_after_a_resume_point_are_dropped(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, tensorboard=False)
    for step in (1, 2, 3, 4):
        writer.write(step, {"losses/loss": float(step)})
    assert writer.keep_through(2) == 2
    writer.write(3, {"losses/loss": 30.0})
    writer.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [1, 2, 3]
