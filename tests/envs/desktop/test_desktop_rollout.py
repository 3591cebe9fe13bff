"""A model drives the desktop: the tiny model's evaluation and two training updates on
`agent_rl/Desktop-v0`, through the real vLLM rollout actor, the learner and a real X desktop."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agent_rl.config import with_overrides
from agent_rl.evaluate.report import TRANSCRIPTS_FILE
from agent_rl.evaluate.runner import evaluate
from agent_rl.metrics import read_metrics
from agent_rl.orchestrate.pipeline import train
from agent_rl.train_config import TrainConfig
from envs.desktop.apps import APT_PACKAGES
from envs.desktop.display import REQUIRED_PROGRAMS

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

DESKTOP = "agent_rl/Desktop-v0"
_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal", "mousepad", "pcmanfm")
            if not shutil.which(program)]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(_missing), reason=f"desktop programs missing: {', '.join(_missing)} (apt-get install -y "
    f"--no-install-recommends {APT_PACKAGES})")]


def test_the_tiny_model_is_evaluated_on_held_out_desktop_tasks(tiny_model: Path,
                                                               tmp_path: Path) -> None:
    recordings = tmp_path / "recordings"
    report = evaluate(tiny_model, env_id=DESKTOP, split="heldout", k=1, limit_per_category=1,
                      out_dir=tmp_path / "eval", max_tokens_per_turn=16, max_turns=2,
                      context_budget=8192, max_model_len=8192, kv_cache_gib=0.25,
                      env_kwargs={"record_dir": str(recordings)})
    assert report.num_episodes == report.num_tasks >= 3
    assert "env_error" not in report.settings["end_reasons"], report.settings["end_reasons"]
    records = [json.loads(line) for line in
               (tmp_path / "eval" / TRANSCRIPTS_FILE).read_text().splitlines()]
    assert len(records) == report.num_episodes
    for record in records:
        opening = record["transcript"][0]["text"]
        assert "The screen now:" in opening and "CLICK" in opening  # observation and actions
        assert "model" in [segment["source"] for segment in record["transcript"]]
    assert len(list(recordings.glob("*/index.html"))) == report.num_episodes


def test_a_desktop_episode_that_outgrows_its_context_ends_on_the_budget_not_an_error(
        tiny_model: Path, tmp_path: Path) -> None:
    """The opening observation alone is over a 512-token budget: every episode ends on it."""
    report = evaluate(tiny_model, env_id=DESKTOP, split="heldout", k=1, limit_per_category=1,
                      out_dir=tmp_path, max_tokens_per_turn=16, max_turns=2,
                      context_budget=512, max_model_len=2048, kv_cache_gib=0.25)
    assert report.settings["end_reasons"] == {"context_budget": report.num_episodes}


def test_two_training_updates_run_on_the_desktop(local_ray, tmp_path: Path) -> None:
    config = with_overrides(TrainConfig.model_validate({
        "model": "tiny",
        "out_dir": tmp_path / "run",
        "env": {"id": DESKTOP, "kwargs": {"max_turns": 2, "record_dir": str(tmp_path / "rec")},
                "eval_tasks": 1},
        "rollout": {"group_size": 2, "max_tokens_per_turn": 16, "context_budget": 8192},
        "engine": {"max_model_len": 8192, "kv_cache_gib": 0.25},
        "learner": {"lr": 1e-4, "diagnose_flat_groups": True},
        "pipeline": {"groups_per_update": 1, "groups_in_flight_per_actor": 2,
                     "num_updates": 2, "stall_timeout_s": 600.0},
    }), {"pipeline.max_lag": 1})
    summary = train(config)
    assert summary.updates == 2
    ledger = summary.ledger
    assert ledger["generated"] == ledger["trained"] + ledger["dropped"]
    assert ledger["trained"] == 2
    records = read_metrics(summary.run_dir)
    assert [record["step"] for record in records] == [1, 2]
    assert all(record["is/tokens"] > 0 for record in records)
    assert list((tmp_path / "rec").glob("*/episode.json"))  # the episodes were recorded
