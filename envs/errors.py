"""The base of the envs package's errors that a user fixes from the message (a bad task file,
an unknown task, an env that breaks the contract)."""

from __future__ import annotations


class EnvsError(Exception):
    """An envs error whose message alone tells the user what to do."""


class EnvBrokenError(EnvsError, RuntimeError):
    """The environment itself failed, not the agent (its sandbox could not start, say).

    A tool raising it ends the step with this error instead of showing the model an error
    message: the episode has no verdict, and a reward of 0 for it would be a lie.
    """
