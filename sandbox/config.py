"""The settings of a sandbox session: backend and resource limits, with safe defaults."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sandbox.errors import SandboxConfigError
from sandbox.host_uids import PYTHON_UID_BASE

__all__ = ["BACKENDS", "SandboxConfig"]

BACKENDS = ("bwrap", "docker", "unsafe-subprocess")
"""`unsafe-subprocess` isolates nothing (it only applies rlimits): for debugging on machines
without bubblewrap or Docker, never for model-written code."""


@dataclass(frozen=True)
class SandboxConfig:
    """Which backend runs a session and the limits every call in it obeys."""

    backend: str = "bwrap"  # one of BACKENDS
    timeout_s: float = 10.0  # wall-clock limit of one call; past it the sandbox is restarted
    memory_mb: int = 512  # address-space limit per process (RLIMIT_AS; cgroup limit on docker)
    max_processes: int = 64  # processes and threads the session may hold at once
    max_file_mb: int = 16  # largest file a call may write (RLIMIT_FSIZE)
    max_output_chars: int = 10_000  # stdout, stderr and value are each cut to this length
    work_dir_mb: int = 64  # size of the private tmpfs work dir (and of /tmp)
    cpus: float = 1.0  # CPU share of a docker container
    # image with a python3 on PATH, docker only; `agent-rl sandbox image build` makes this one
    docker_image: str = "agent-rl/sandbox-python:3.11"
    start_timeout_s: float = 10.0  # how long a new sandbox may take to answer its handshake
    sandbox_uid_base: int = PYTHON_UID_BASE  # bwrap as root: sessions run as unprivileged uids above this

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            nearest = difflib.get_close_matches(self.backend, BACKENDS, n=1)
            hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
            raise SandboxConfigError(
                f"unknown sandbox backend {self.backend!r}: choose one of {BACKENDS}{hint}")
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb",
                     "max_output_chars", "work_dir_mb", "cpus", "start_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise SandboxConfigError(
                    f"SandboxConfig.{name} must be a positive number, got {value!r}")
        if self.memory_mb < 64:
            raise SandboxConfigError(
                f"SandboxConfig.memory_mb={self.memory_mb} is too small for a Python interpreter;"
                " use at least 64")
        if self.max_processes < 4:
            raise SandboxConfigError(
                f"SandboxConfig.max_processes={self.max_processes} leaves no room for the kernel's"
                " own threads; use at least 4")

    @property
    def max_output_bytes(self) -> int:
        """Bytes of each stream forwarded per call: enough for max_output_chars of UTF-8."""
        return 4 * self.max_output_chars

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SandboxConfig:
        """Build from YAML-loaded data; an unknown key is an error naming the nearest field."""
        names = [field.name for field in fields(cls)]
        for key in values:
            if key not in names:
                nearest = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
                raise SandboxConfigError(f"unknown SandboxConfig key {key!r}{hint}")
        return cls(**values)
