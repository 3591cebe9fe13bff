"""The base of the envs package's errors that a user fixes from the message (a bad task file,
an unknown task, an env that breaks the contract)."""

from __future__ import annotations


class EnvsError(Exception):
    """An envs error whose message alone tells the user what to do."""
