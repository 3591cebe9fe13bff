"""The base of the kernels package's errors that a user fixes from the message (a checkpoint
the matched model cannot represent, a backend this machine lacks)."""

from __future__ import annotations


class KernelsError(Exception):
    """A kernels error whose message alone tells the user what to do."""
