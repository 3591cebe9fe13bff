"""Exceptions the sandbox raises to its callers.

A limit hit by user code is not an exception: it comes back in `ExecResult.limit`. These are for
the host side going wrong (a backend missing, a sandbox that will not start, a closed session).
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "SandboxClosedError",
    "SandboxConfigError",
    "SandboxError",
    "SandboxFileError",
    "SandboxStartError",
]


class SandboxError(Exception):
    """Base class of every error the sandbox package raises."""


class SandboxConfigError(SandboxError, ValueError):
    """A `SandboxConfig` field has a value the sandbox cannot use."""


class SandboxStartError(SandboxError):
    """A sandbox process did not start or did not answer its first handshake."""


class BackendUnavailableError(SandboxStartError):
    """The chosen backend cannot run on this machine (tool missing, daemon not answering)."""


class SandboxClosedError(SandboxError):
    """The session was used after `close()`."""


class SandboxFileError(SandboxError):
    """A file could not be written into or read out of a session."""
