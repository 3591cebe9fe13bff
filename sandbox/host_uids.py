"""Unprivileged host uids for sandboxes started by root.

A sandbox that root starts inside a user namespace is uid 1000 inside but host root outside, so
the host's file permissions treat it as root. Sandboxes started by root therefore run as a host
uid of their own, taken from a range that no account uses, and the host's permissions apply to
them as to any stranger. Each live sandbox holds its own uid, so two of them never share a
process budget or each other's files, even when they belong to different host processes (a
training run's rollout actor and an evaluation beside it): a uid is held by an exclusive lock on
a file named after it, which the kernel drops when its holder dies, so a crashed process leaks
no uid. Each process starts its search at a point spread by its pid, so they rarely contend.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import threading
import time
from pathlib import Path

from sandbox.errors import BackendUnavailableError

__all__ = ["PYTHON_UID_BASE", "DESKTOP_UID_BASE", "give_back", "processes_of", "take"]

logger = logging.getLogger(__name__)

SLOTS_PER_PROCESS = 1000
_PROCESS_SPREAD = 997  # a prime, so pids spread evenly over the range
RANGE = SLOTS_PER_PROCESS * _PROCESS_SPREAD
PYTHON_UID_BASE = 200_000  # the Python tool's sessions: [200_000, 200_000 + RANGE)
DESKTOP_UID_BASE = PYTHON_UID_BASE + RANGE  # desktop episodes, the next range up
LOCK_DIR = Path("/tmp/agent-rl-sandbox-uids")

_lock = threading.Lock()
_held: dict[int, int] = {}  # uid -> the descriptor whose lock holds it


def take(base: int) -> int:
    """A host uid in `[base, base + RANGE)` that no other live sandbox on this host holds."""
    offset = (os.getpid() % _PROCESS_SPREAD) * SLOTS_PER_PROCESS
    with _lock:
        LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        for slot in range(SLOTS_PER_PROCESS):
            uid = base + (offset + slot) % RANGE
            if uid not in _held and (fd := _lock_uid(uid)) is not None:
                _held[uid] = fd
                return uid
    raise BackendUnavailableError(
        f"{SLOTS_PER_PROCESS} sandbox uids above {base + offset} are all in use on this host")


def give_back(uid: int, timeout_s: float = 5.0) -> None:
    """Free a uid once no process runs under it. A sandbox's inner processes die after the
    sandbox's leader (by a parent-death signal), so some may still run when the caller has reaped
    the leader; they are killed and waited for first, lest the next holder inherit them. A uid
    whose processes outlive `timeout_s` stays held until this process exits."""
    deadline = time.monotonic() + timeout_s
    while pids := processes_of(uid):
        if time.monotonic() > deadline:
            logger.warning("processes %s of sandbox uid %d survive SIGKILL; the uid stays held",
                           pids, uid)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    with _lock:
        fd = _held.pop(uid, None)
    if fd is not None:
        os.close(fd)  # drops the lock


def processes_of(uid: int) -> list[int]:
    """The live host pids owned by `uid`; zombies run nothing and are left to their parents."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid and not _is_zombie(entry.path):
                    pids.append(int(entry.name))
    return pids


def _is_zombie(proc_dir: str) -> bool:
    with open(f"{proc_dir}/stat", "rb") as stat:
        return stat.read().rpartition(b")")[2].split()[0] == b"Z"


def _lock_uid(uid: int) -> int | None:
    """A descriptor holding `uid`'s lock, or None when another process holds it. Close-on-exec,
    so a sandbox's own processes never inherit (and outlive us holding) the lock."""
    fd = os.open(LOCK_DIR / str(uid), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
