"""Backends start a kernel in some kind of isolation and return the transport to it.

Each is one module with `start(config) -> Transport`; this table is the only place that maps a
`SandboxConfig.backend` name to one, and imports stay lazy so a missing `docker` package only
matters to the docker backend.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from sandbox.config import SandboxConfig
from sandbox.transport import Transport

__all__ = ["KERNEL_PATH", "kernel_settings", "start_kernel"]

KERNEL_PATH = Path(__file__).resolve().parent.parent / "_kernel.py"

_MODULES = {
    "bwrap": "sandbox.backends.bwrap",
    "docker": "sandbox.backends.docker_backend",
    "unsafe-subprocess": "sandbox.backends.unsafe_subprocess",
}


def kernel_settings(config: SandboxConfig, work_dir: str, **overrides: Any) -> dict[str, Any]:
    """The settings the kernel applies to itself before it runs any user code."""
    settings: dict[str, Any] = {
        "work_dir": work_dir,
        "writable_dirs": [],
        "uid": None,
        "memory_bytes": config.memory_mb << 20,
        "max_processes": config.max_processes,
        "max_file_bytes": config.max_file_mb << 20,
        "max_output_bytes": config.max_output_bytes,
        "max_output_chars": config.max_output_chars,
    }
    return settings | overrides


def start_kernel(config: SandboxConfig) -> Transport:
    """Start one sandboxed kernel as `config.backend` says.

    Raises:
        BackendUnavailableError: the backend cannot run here.
    """
    return importlib.import_module(_MODULES[config.backend]).start(config)
