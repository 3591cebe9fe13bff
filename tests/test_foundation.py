"""The foundation: model store, config loading, and the `agent-rl` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from agent_rl.config import ConfigError, StrictModel, load_config
from agent_rl.model_store import (
    ModelNotFoundError,
    model_info,
    prepare_default_model,
    resolve_model,
    verify_model,
)

AGENT_RL = [sys.executable, "-m", "agent_rl"]


class _Optim(StrictModel):
    lr: float = Field(1e-5, description="learning rate")


class _Run(StrictModel):
    max_lag: int = Field(64, ge=0, description="versions a token may lag when trained")
    optim: _Optim = Field(default_factory=_Optim)


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENT_RL, *args], capture_output=True, text=True, timeout=timeout)


def test_tiny_model_is_a_real_checkpoint_with_chat_template(tiny_model: Path) -> None:
    info = model_info(tiny_model)
    assert info["layers"] == 2 and info["chat_template"] and info["verified"]
    assert resolve_model("tiny") == tiny_model


def test_unknown_config_key_names_the_nearest_valid_one(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("max_lags: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'max_lag'"):
        load_config(path, _Run)
    path.write_text("optim:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError, match="optim.lrr.*did you mean 'lr'"):
        load_config(path, _Run)


def test_config_wrong_type_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("max_lag: lots\n")
    with pytest.raises(ConfigError, match="max_lag = 'lots' is invalid"):
        load_config(path, _Run)
    path.write_text("max_lag: 8\n")
    config = load_config(path, _Run, overrides={"optim.lr": 0.5})
    assert config.max_lag == 8 and config.optim.lr == 0.5


def test_missing_model_is_a_clear_error() -> None:
    with pytest.raises(ModelNotFoundError, match="nothing is downloaded"):
        resolve_model("/no/such/model")


def test_cli_missing_model_prints_one_line_not_a_traceback() -> None:
    done = run_cli("model", "info", "/no/such/model")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "error:" in done.stderr


def test_cli_model_without_chat_template_prints_one_line(tiny_model: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for item in tiny_model.iterdir():
        if item.name != "chat_template.jinja":
            (bare / item.name).symlink_to(item)
    config = json.loads((tiny_model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").unlink()
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    done = run_cli("generate", "hi", "--model", str(bare))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no chat template" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_generate_logprobs_match_transformers_fp32(tiny_model: Path) -> None:
    done = run_cli("generate", "What is 2+3?", "--model", str(tiny_model), "--max-tokens", "12")
    assert done.returncode == 0, done.stderr[-3000:]
    worst = float(done.stdout.strip().splitlines()[-1].split("=")[-1])
    assert worst <= 1e-4


@pytest.mark.slow
def test_default_model_prepares_verifies_and_answers() -> None:
    paths = prepare_default_model()
    for path in paths.values():
        verify_model(path)
    done = run_cli("generate", "What is 2+3?", "--max-tokens", "16")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5" in done.stdout.splitlines()[0]
    worst = float(done.stdout.strip().splitlines()[-1].split("=")[-1])
    assert worst <= 1e-4
