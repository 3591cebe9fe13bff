"""The base of every error a user can fix from its message alone.

The CLI prints such an error as one line and exits with status 2 (`agent_rl.cli.main`); anything
else is a bug and keeps its traceback. envs/, sandbox/ and kernels/ keep their own bases
(`envs.errors.EnvsError`, `sandbox.errors.SandboxError`, `kernels.errors.KernelsError`), since
they never import agent_rl.
"""

from __future__ import annotations


class UserError(Exception):
    """An error whose message alone tells the user what to do."""
