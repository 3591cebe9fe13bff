"""Multi-turn tool-using environments, registered with Gymnasium under the `agent_rl/` namespace.

Importing `envs` registers the environments; create them with
`gymnasium.make("agent_rl/PythonTool-v0")`. See `envs/registration.py`.
"""

from envs import registration as _registration  # noqa: F401 - registers the env ids

