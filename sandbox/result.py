"""The outcome of one call into a session."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LIMITS", "ExecResult"]

LIMITS = ("timeout", "memory", "processes", "file_size", "output")
"""The values `ExecResult.limit` can take besides None."""


@dataclass(frozen=True)
class ExecResult:
    """What a call printed, returned and raised, and which limit (if any) it hit.

    `restarted` means the sandbox was killed and started afresh during this call (timeout,
    crash): the next call runs in a clean interpreter and earlier variables and files are gone.
    Limits that Python reports as exceptions (memory, processes, file size) leave the session
    running, so `restarted` stays False for them.
    """

    stdout: str
    stderr: str
    value: str | None
    """repr() of the last statement when it is an expression whose value is not None."""
    error: str | None
    """Traceback text of an exception the code raised, or a sentence saying why the call failed."""
    error_type: str | None
    exit_status: int
    """0 when the code ran to the end, its code on `sys.exit`, 1 on an exception, and the
    kernel's exit status (negative: killed by that signal) when it died."""
    wall_s: float
    timed_out: bool = False
    truncated: bool = False
    crashed: bool = False
    limit: str | None = None
    restarted: bool = False

    @property
    def ok(self) -> bool:
        """The code ran to its end without an exception, exit or limit."""
        return (self.error is None and self.exit_status == 0 and not self.timed_out
                and not self.crashed and self.limit is None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for logs and trajectories."""
        return asdict(self) | {"ok": self.ok}
