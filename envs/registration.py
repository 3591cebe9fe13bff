"""Gymnasium registrations: one `register` call per environment, string entry points only.

String entry points keep `import envs` cheap: an env's module (and its dependencies, such as
the sandbox or Xvfb) loads only when `gymnasium.make` builds it.
"""

from gymnasium.envs.registration import register

__all__ = ["ENV_IDS"]

register(id="agent_rl/PythonTool-v0", entry_point="envs.python_tool:PythonToolEnv")
register(id="agent_rl/Desktop-v0", entry_point="envs.desktop:DesktopEnv")
register(id="agent_rl/WordCount-v0", entry_point="envs.examples.word_count_env:load_environment")
register(id="agent_rl/Parity-v0", entry_point="envs.examples.parity_env:ParityEnv")

ENV_IDS: tuple[str, ...] = (
    "agent_rl/PythonTool-v0",
    "agent_rl/Desktop-v0",
    "agent_rl/WordCount-v0",
    "agent_rl/Parity-v0",
)
