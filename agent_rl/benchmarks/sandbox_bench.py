"""How much a sandboxed tool call costs, next to a bare `python -c pass` subprocess.

Measured per backend that can run here: session start (cold, and handed out by a warm pool),
the round trip of a trivial call, and a call doing 10 ms of work (its overhead is the wall time
minus those 10 ms). Targets: a pooled hand-out plus a call under 2x the bare subprocess start,
and under 5 ms of overhead for a call in a warm session.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from sandbox import (
    BACKENDS,
    BackendUnavailableError,
    SandboxConfig,
    Session,
    SessionPool,
    open_session,
)

__all__ = ["run"]

BUSY_10MS = ("import time\nstart = time.perf_counter()\nwhile time.perf_counter() - start < 0.01:\n"
             "    pass\ntime.perf_counter() - start")
POOLED_TARGET_RATIO = 2.0
WARM_OVERHEAD_TARGET_MS = 5.0


def _times_ms(action: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


def _row(backend: str, metric: str, samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"backend": backend, "metric": metric, "median_ms": statistics.median(ordered),
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))], "repeats": len(ordered)}


def _bare_start(repeats: int) -> dict:
    command = [sys.executable, "-c", "pass"]
    samples = _times_ms(lambda: subprocess.run(command, check=True), repeats)
    return _row("bare subprocess", "start (python -c pass)", samples)


def _pooled_call(pool: SessionPool) -> None:
    session = pool.acquire(timeout_s=30)
    session.run("None")
    pool.release(session)


def _backend_rows(backend: str, repeats: int) -> list[dict]:
    config = SandboxConfig(backend=backend)
    rows = [_row(backend, "cold start", _times_ms(lambda: open_session(config).close(), repeats))]
    with SessionPool(config, size=2) as pool:
        acquire_samples, call_samples = [], []
        for _ in range(repeats):
            deadline = time.monotonic() + 30
            while pool.ready < pool.size and time.monotonic() < deadline:
                time.sleep(0.005)  # measure the hand-out, not the background reset
            acquire_samples += _times_ms(lambda: pool.release(pool.acquire(timeout_s=30)), 1)
            while pool.ready < pool.size and time.monotonic() < deadline:
                time.sleep(0.005)
            call_samples += _times_ms(lambda: _pooled_call(pool), 1)
        rows.append(_row(backend, "pooled acquire+release", acquire_samples))
        rows.append(_row(backend, "pooled acquire+call+release", call_samples))
    with open_session(config) as session:
        session.run("None")
        rows.append(_row(backend, "warm call (trivial)",
                         _times_ms(lambda: session.run("None"), repeats)))
        rows.append(_row(backend, "warm call (10 ms work), overhead",
                         [_busy_call_overhead_ms(session) for _ in range(repeats)]))
    return rows


def _busy_call_overhead_ms(session: Session) -> float:
    """Wall time of the call minus the time the code itself measured inside the sandbox."""
    started = time.perf_counter()
    result = session.run(BUSY_10MS)
    wall_ms = (time.perf_counter() - started) * 1e3
    return wall_ms - float(result.value or 0.0) * 1e3


def run(console: Console, repeats: int = 20, backends: list[str] | None = None) -> list[dict]:
    """Measure `backends` (default: every one that runs here) and the bare subprocess side by
    side; print a table, return its rows.

    Each row: backend, metric, median_ms, p90_ms, repeats, and `vs_bare` (the median over the
    bare subprocess's start) for start-like metrics.
    """
    rows = [_bare_start(repeats)]
    bare_ms = rows[0]["median_ms"]
    for backend in backends or BACKENDS:
        if backend not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {backend!r}; choose from {BACKENDS}")
        try:
            rows += _backend_rows(backend, repeats)
        except BackendUnavailableError as error:
            console.print(f"[yellow]skipped {backend}[/]: {error}")
    for row in rows:
        if "start" in row["metric"] or "pooled" in row["metric"]:
            row["vs_bare"] = row["median_ms"] / bare_ms
    table = Table(title=f"Sandbox cost, median of {repeats} (bare `python -c pass` ="
                        f" {bare_ms:.1f} ms)")
    for column in ("backend", "metric", "median ms", "p90 ms", "vs bare start", "target"):
        table.add_column(column, justify="left" if column in ("backend", "metric") else "right")
    for row in rows:
        table.add_row(row["backend"], row["metric"], f"{row['median_ms']:.2f}",
                      f"{row['p90_ms']:.2f}",
                      f"{row['vs_bare']:.2f}x" if "vs_bare" in row else "", _verdict(row))
    console.print(table)
    return rows


def _verdict(row: dict) -> str:
    if row["metric"] == "pooled acquire+call+release":
        ok = row["vs_bare"] < POOLED_TARGET_RATIO
        return f"{'[green]met' if ok else '[red]missed'}[/] (< {POOLED_TARGET_RATIO:g}x)"
    if row["metric"].startswith("warm call"):
        ok = row["median_ms"] < WARM_OVERHEAD_TARGET_MS
        return f"{'[green]met' if ok else '[red]missed'}[/] (< {WARM_OVERHEAD_TARGET_MS:g} ms)"
    return ""
