"""Isolated, persistent Python sessions for tool calls.

A session is a long-lived Python kernel inside a sandbox (bubblewrap by default, Docker by
config); each call execs code in it and returns an `ExecResult`. Limits (wall time, memory,
processes, file size, output size) are set in `SandboxConfig`; a call that hits one says which.
`SessionPool` keeps sessions started so an episode does not wait for one.

This package must not import `agent_rl`: it is the one part that runs untrusted code.
"""

from sandbox.config import BACKENDS, SandboxConfig
from sandbox.errors import (
    BackendUnavailableError,
    SandboxClosedError,
    SandboxConfigError,
    SandboxError,
    SandboxFileError,
    SandboxStartError,
)
from sandbox.pool import SessionPool
from sandbox.result import LIMITS, ExecResult
from sandbox.session import Session, open_async_session, open_session

__all__ = [
    "BACKENDS",
    "LIMITS",
    "BackendUnavailableError",
    "ExecResult",
    "SandboxClosedError",
    "SandboxConfig",
    "SandboxConfigError",
    "SandboxError",
    "SandboxFileError",
    "SandboxStartError",
    "Session",
    "SessionPool",
    "open_async_session",
    "open_session",
]
