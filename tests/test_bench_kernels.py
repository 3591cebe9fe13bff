"""`agent-rl bench kernels` runs both kernel sets side by side, also at the agent shape (long
prompts sampled as groups), and reports every row it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("shape", [[], ["--prompt-tokens", "40", "--group-size", "3"]],
                         ids=["short", "agent"])
def test_bench_kernels_reports_matched_and_default(tmp_path: Path, shape: list[str]) -> None:
    out = tmp_path / "rows.json"
    result = subprocess.run(
        [sys.executable, "-m", "agent_rl", "bench", "kernels", "--model", "tiny",
         "--batch-size", "2", "--max-tokens", "4", *shape, "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {(row["part"], row["kernels"]) for row in rows} == {
        (part, kernels) for part in ("rollout", "learner fwd+bwd")
        for kernels in ("default", "matched")}
    assert all(row["tokens_per_s"] > 0 for row in rows)
    assert "matched / default" in result.stdout
