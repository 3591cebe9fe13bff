"""Ctrl-C on `agent-rl train`: the run stops, prints its ledger, and saves it with every group
accounted for (trained, dropped, or waiting to be resumed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

START_TIMEOUT_S = 600  # Ray and a vLLM engine start slowly on 2 loaded cores


def _interrupt(process: subprocess.Popen) -> str:
    """Ctrl-C the run (kill it if it does not stop); its output, after checking it failed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        output, _ = process.communicate(timeout=180)
    except ValueError:  # a failed check above has read the output already
        output = ""
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0, output[-3000:]
    return output


@pytest.mark.slow
def test_ctrl_c_prints_and_saves_a_balanced_ledger(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    command = [sys.executable, "-m", "agent_rl.cli.main", "train", "configs/smoke.yaml",
               "--set", f"out_dir={out_dir}", "--set", "pipeline.num_updates=1000"]
    # Started with SIGINT ignored, as a shell starts a background job (and as CI may run us):
    # the run must still stop on SIGINT.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "200"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        metrics = out_dir / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no update within the start timeout"
            time.sleep(1)
    finally:
        output = _interrupt(process)
    assert "ledger at exit" in output, output[-3000:]
    ledger = json.loads((out_dir / "ledger.json").read_text())
    assert ledger["status"].startswith("interrupted: KeyboardInterrupt")
    waiting = set(ledger["queued"]) | set(ledger["in_flight"]) | set(ledger["to_rerun"])
    accounted = set(ledger["trained"]) | set(ledger["dropped"]) | waiting
    assert set(ledger["generated"]) <= accounted
    assert len(ledger["trained"]) == len(set(ledger["trained"])) >= 2


@pytest.mark.slow
def test_ctrl_c_during_start_up_leaves_no_process_behind(tmp_path: Path) -> None:
    import psutil

    command = [sys.executable, "-m", "agent_rl.cli.main", "train", "configs/smoke.yaml",
               "--set", f"out_dir={tmp_path / 'run'}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "200"})
    seen: dict[int, tuple[psutil.Process, str]] = {}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        # Wait until vLLM's engine is being built inside a Ray actor: the worst moment to stop.
        while not any("VLLM" in name or "EngineCor" in name for _, name in seen.values()):
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the engine never started"
            for child in psutil.Process(process.pid).children(recursive=True):
                try:  # names change: vLLM's processes rename themselves once started
                    seen[child.pid] = (child, child.name())
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.5)
    finally:
        output = _interrupt(process)
    assert "stopped before the first update" in output, output[-3000:]
    survivors = []
    for child, name in seen.values():
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                survivors.append(f"{child.pid} {name}")
        except psutil.NoSuchProcess:
            pass
    assert survivors == [], f"still running after Ctrl-C: {survivors}"
