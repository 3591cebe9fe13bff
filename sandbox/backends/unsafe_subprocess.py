"""UNSAFE backend: the kernel as a plain child process, with rlimits and nothing else.

It shares the host's filesystem, network and user; as root even RLIMIT_NPROC does not apply. It
exists to debug the kernel where neither bubblewrap nor Docker is available. Never use it for
code a model wrote.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from sandbox.backends import KERNEL_PATH, kernel_settings
from sandbox.config import SandboxConfig
from sandbox.transport import ProcessTransport

__all__ = ["start"]

logger = logging.getLogger(__name__)
_warned = False


class TempDirTransport(ProcessTransport):
    """Removes the session's work dir when the kernel is killed."""

    def __init__(self, argv: list[str], work_dir: Path) -> None:
        super().__init__(argv, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work_dir)})
        self._work_dir = work_dir

    def kill(self, grace_s: float = 0.0) -> int | None:
        status = super().kill(grace_s)
        shutil.rmtree(self._work_dir, ignore_errors=True)
        return status


def start(config: SandboxConfig) -> TempDirTransport:
    """Start one kernel without isolation."""
    global _warned
    if not _warned:
        _warned = True
        logger.warning("sandbox backend 'unsafe-subprocess' isolates nothing; do not run"
                       " untrusted code with it")
    work_dir = Path(tempfile.mkdtemp(prefix="agent-rl-unsafe-"))
    settings = kernel_settings(config, str(work_dir))
    argv = [sys.executable, "-I", "-S", "-B", str(KERNEL_PATH), json.dumps(settings)]
    return TempDirTransport(argv, work_dir)
