"""`agent-rl bench kernels` runs both kernel sets side by side, also at the agent shape (long
prompts sampled as groups), and reports every row it measured; `agent-rl bench gemm` does the same
for the matched GEMM against vLLM's oneDNN one."""

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


def test_bench_gemm_reports_every_projection_at_every_row_count(tmp_path: Path) -> None:
    from vllm import _custom_ops

    if not _custom_ops._supports_onednn:
        pytest.skip("this vLLM build has no oneDNN GEMM to compare the matched one with")
    out = tmp_path / "rows.json"
    result = subprocess.run(
        [sys.executable, "-m", "agent_rl", "bench", "gemm", "--model", "tiny", "--rows", "4,20",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(row["rows"], row["projection"]) for row in rows] == [
        (m, name) for m in (4, 20)
        for name in ("q/o_proj", "k/v_proj", "gate/up_proj", "down_proj", "lm_head")]
    assert all(row["matched_gflops"] > 0 and row["onednn_gflops"] > 0 for row in rows)
    assert "lm_head" in result.stdout and "ratio" in result.stdout
