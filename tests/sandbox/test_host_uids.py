"""Host uids are unique per live sandbox across processes, not only within one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sandbox import host_uids

BASE = 50_000_000  # far from the ranges real sandboxes use, so a run beside the tests is unaffected


def test_a_uid_is_held_until_given_back() -> None:
    first, second = host_uids.take(BASE), host_uids.take(BASE)
    assert first != second
    host_uids.give_back(first)
    assert host_uids.take(BASE) == first
    host_uids.give_back(first)
    host_uids.give_back(second)


def test_another_process_starting_at_the_same_slot_gets_another_uid() -> None:
    """Two processes whose pids spread to the same start (pids wrap at 32768 on many hosts)."""
    held = host_uids.take(BASE)
    child = (f"import os; from sandbox import host_uids; host_uids.os.getpid = lambda: {os.getpid()}; "
             f"print(host_uids.take({BASE}))")
    try:
        taken = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                               check=True).stdout
        assert int(taken) != held
    finally:
        host_uids.give_back(held)
    again = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                           check=True).stdout
    assert int(again) == held, "a uid given back (or held by a dead process) is free again"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: only root starts sandboxes as other uids")
def test_giving_back_a_uid_kills_what_still_runs_under_it() -> None:
    """A sandbox's inner processes can outlive its reaped leader for a moment."""
    uid = host_uids.take(BASE)
    straggler = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                  "--clear-groups", "sleep", "60"])
    try:
        while not host_uids.processes_of(uid):
            time.sleep(0.01)
        host_uids.give_back(uid)
        assert straggler.wait(timeout=5) == -signal.SIGKILL
        assert host_uids.processes_of(uid) == []
        assert host_uids.take(BASE) == uid, "the uid was not freed"
        host_uids.give_back(uid)
    finally:
        straggler.kill()
