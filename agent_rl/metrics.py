"""Per-update metrics to `metrics.jsonl` (always) and TensorBoard (when it is installed).

Names are namespaced like CleanRL's (`is/max`, `losses/loss`, `lag/hist`). The JSONL file is the
record `plot.py` reads; TensorBoard gets the scalars and the lag histogram.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"  # a finished run's timings and ledger counts


class MetricsWriter:
    """Appends one JSON line per update; mirrors numeric values to TensorBoard if available."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._file = self.path.open("a")
        self._tb = _open_tensorboard(self.run_dir / "tb") if tensorboard else None

    def keep_through(self, step: int) -> int:
        """Drop the records after `step` (a run resumed from a checkpoint at `step` writes
        them again); returns how many were dropped."""
        self._file.close()
        lines = self.path.read_text().splitlines(keepends=True) if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
        self.path.write_text("".join(kept))
        self._file = self.path.open("a")
        return len(lines) - len(kept)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        self._file.write(json.dumps(record, default=_json_default) + "\n")
        self._file.flush()
        if self._tb is None:
            return
        for name, value in metrics.items():
            if isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                self._tb.add_scalar(name, value, step)
            elif name == "lag/hist" and isinstance(value, dict) and value:
                lags = [int(lag) for lag, count in value.items() for _ in range(int(count))]
                self._tb.add_histogram(name, np.asarray(lags), step)
        self._tb.flush()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    (Path(run_dir) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A finished run's summary (mode, updates, wall times, updates/hour, lag, ledger).

    Raises:
        ConfigError: the run never finished (or the folder is not a run).
    """
    from agent_rl.config import ConfigError

    path = Path(run_dir) / SUMMARY_FILE
    if not path.exists():
        raise ConfigError(f"{run_dir} has no {SUMMARY_FILE} (written when `agent-rl train` or "
                          "`agent-rl bench pipeline` finishes a run)")
    return json.loads(path.read_text())


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All records of a run, in order; the last record wins when a resumed run rewrote a step."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_step[record["step"]] = record
    return sorted(by_step.values(), key=lambda record: record["step"])


def _open_tensorboard(log_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.info("tensorboard is not installed; writing metrics to JSONL only")
        return None
    return SummaryWriter(log_dir=str(log_dir))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"metric value {value!r} of type {type(value).__name__} is not JSON")
