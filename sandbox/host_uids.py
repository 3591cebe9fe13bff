"""Unprivileged host uids for sandboxes started by root.

A sandbox that root starts inside a user namespace is uid 1000 inside but host root outside, so
the host's file permissions treat it as root. Sandboxes started by root therefore run as a host
uid of their own, taken from a range that no account uses, and the host's permissions apply to
them as to any stranger. Each live sandbox holds its own uid, so two of them never share a
process budget or each other's files; uids are unique within a host process and spread by its
pid across processes.
"""

from __future__ import annotations

import os
import threading

from sandbox.errors import BackendUnavailableError

__all__ = ["PYTHON_UID_BASE", "DESKTOP_UID_BASE", "give_back", "take"]

SLOTS_PER_PROCESS = 1000
_PROCESS_SPREAD = 997  # a prime, so pids spread evenly over the range
RANGE = SLOTS_PER_PROCESS * _PROCESS_SPREAD
PYTHON_UID_BASE = 200_000  # the Python tool's sessions: [200_000, 200_000 + RANGE)
DESKTOP_UID_BASE = PYTHON_UID_BASE + RANGE  # desktop episodes, the next range up

_lock = threading.Lock()
_in_use: set[int] = set()


def take(base: int) -> int:
    """A host uid in `[base, base + RANGE)` that no other sandbox of this process holds."""
    offset = (os.getpid() % _PROCESS_SPREAD) * SLOTS_PER_PROCESS
    with _lock:
        for slot in range(SLOTS_PER_PROCESS):
            uid = base + (offset + slot) % RANGE
            if uid not in _in_use:
                _in_use.add(uid)
                return uid
    raise BackendUnavailableError(
        f"all {SLOTS_PER_PROCESS} sandbox uids of this process above {base} are in use")


def give_back(uid: int) -> None:
    """Free a uid once the sandbox that held it is dead."""
    with _lock:
        _in_use.discard(uid)
