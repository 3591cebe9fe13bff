"""Bubblewrap backend: one fresh set of namespaces per session, the host visible read-only and
only where the interpreter needs it.

What a session sees: /usr (and the /bin, /lib* links or dirs), the host interpreter's prefix
mounted read-only at /opt/python, the kernel script, a private /proc and /dev, and two private
tmpfs dirs (/work, the work dir, and /tmp). Not /etc, not the home dir, not the project.

Namespaces: mount, PID, IPC, UTS, network and cgroup always. The user namespace depends on who
runs us. Unprivileged, bwrap creates one and maps the sandbox uid to our uid. As root (checked
here: bwrap's user namespace works) it would map the sandbox uid to host uid 0, and the kernel
exempts host root from RLIMIT_NPROC, so a fork bomb is not bounded, and an escape would be
host root. As root we therefore skip the user namespace: bwrap runs privileged, grants the kernel
only CAP_SETUID/SETGID/CHOWN, and the kernel drops to an unprivileged host uid of its own
(`sandbox_uid_base` + a slot) before any user code runs; bwrap sets no_new_privs, so setuid
binaries cannot take privileges back. Two live sessions with the same uid would share one process
budget; `sandbox.host_uids` hands them out.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from sandbox import host_uids
from sandbox.backends import KERNEL_PATH, kernel_settings
from sandbox.config import SandboxConfig
from sandbox.errors import BackendUnavailableError
from sandbox.transport import ProcessTransport

__all__ = ["build_argv", "start", "system_mounts"]

SANDBOX_PYTHON_PREFIX = "/opt/python"
SANDBOX_KERNEL_PATH = "/opt/agent-rl/kernel.py"
WORK_DIR = "/workspace"


def _bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise BackendUnavailableError(
            "bubblewrap (`bwrap`) is not on PATH; install it (Debian: apt-get install bubblewrap)"
            " or choose SandboxConfig(backend='docker')")
    return path


def system_mounts() -> list[str]:
    """Read-only /usr and the /bin, /lib* links or folders beside it: what a program needs to
    run, and nothing of the host's data."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return args


def _python_mounts() -> tuple[list[str], str, dict[str, str]]:
    """Mounts, interpreter path and environment for running the host's base interpreter.

    A prefix under /usr is already visible. Any other prefix (pyenv under /root, conda) is
    mounted at /opt/python so the sandbox never sees the path it came from; its RUNPATH still
    names the old place, hence LD_LIBRARY_PATH.
    """
    prefix = Path(sys.base_prefix).resolve()
    interpreter = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    if not interpreter.is_relative_to(prefix):
        raise BackendUnavailableError(
            f"the interpreter {interpreter} is not inside its prefix {prefix}; the bwrap backend"
            " cannot tell which directory to mount for it")
    if prefix.is_relative_to("/usr"):
        return [], str(interpreter), {}
    inside = Path(SANDBOX_PYTHON_PREFIX) / interpreter.relative_to(prefix)
    return (["--ro-bind", str(prefix), SANDBOX_PYTHON_PREFIX], str(inside),
            {"LD_LIBRARY_PATH": f"{SANDBOX_PYTHON_PREFIX}/lib"})


def build_argv(config: SandboxConfig, uid: int | None) -> list[str]:
    """The bwrap command line of one session; `uid` is the host uid to drop to (as root)."""
    python_mounts, interpreter, python_env = _python_mounts()
    env = {"HOME": WORK_DIR, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "TMPDIR": "/tmp"} | python_env
    tmpfs_bytes = str(config.work_dir_mb << 20)
    args = [_bwrap_path(), "--die-with-parent", "--new-session", "--unshare-ipc",
            "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox"]
    if uid is None:
        args += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    else:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_CHOWN"]
    # Dirs bwrap creates on its own are 0700 root: the dropped uid could not enter them.
    args += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/agent-rl"]
    args += system_mounts() + python_mounts
    args += ["--ro-bind", str(KERNEL_PATH), SANDBOX_KERNEL_PATH,
             "--proc", "/proc", "--dev", "/dev",
             "--perms", "0700", "--size", tmpfs_bytes, "--tmpfs", WORK_DIR,
             "--perms", "1777", "--size", tmpfs_bytes, "--tmpfs", "/tmp",
             "--chdir", WORK_DIR, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    settings = kernel_settings(config, WORK_DIR, uid=uid,
                               writable_dirs=[WORK_DIR] if uid is not None else [])
    return args + ["--", interpreter, "-I", "-S", "-B", SANDBOX_KERNEL_PATH, json.dumps(settings)]


class BwrapTransport(ProcessTransport):
    """Gives the session's uid back once the sandbox is dead."""

    def __init__(self, argv: list[str], uid: int | None) -> None:
        super().__init__(argv, env={})
        self._uid = uid

    def kill(self, grace_s: float = 0.0) -> int | None:
        status = super().kill(grace_s)
        if self._uid is not None:
            host_uids.give_back(self._uid)
            self._uid = None
        return status


def start(config: SandboxConfig) -> BwrapTransport:
    """Start one kernel under bubblewrap."""
    uid = host_uids.take(config.sandbox_uid_base) if os.geteuid() == 0 else None
    try:
        return BwrapTransport(build_argv(config, uid), uid)
    except BaseException:
        if uid is not None:
            host_uids.give_back(uid)
        raise
