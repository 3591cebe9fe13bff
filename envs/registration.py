"""Gymnasium registrations: one `register` call per environment, string entry points only.

String entry points keep `import envs` cheap: an env's module (and its dependencies, such as
the sandbox or Xvfb) loads only when `gymnasium.make` builds it.

Gymnasium's passive env checker is off for these envs: when the first `reset` raises (a task
whose set-up fails, an X server that does not start), the checker never records that reset's
result, and every later `step` fails in the checker ("cannot unpack non-iterable NoneType")
however well the next reset went. The suite runs `gymnasium.utils.env_checker.check_env` on
each env instead (tests/envs/test_envs.py), a stricter check than the passive one.
"""

from gymnasium.envs.registration import register

__all__ = ["ENV_IDS"]

register(id="agent_rl/PythonTool-v0", entry_point="envs.python_tool:PythonToolEnv",
         disable_env_checker=True)
register(id="agent_rl/Desktop-v0", entry_point="envs.desktop:DesktopEnv",
         disable_env_checker=True)
register(id="agent_rl/DesktopGen-v0", entry_point="envs.desktop:DesktopEnv",
         kwargs={"task_source": "generated"}, disable_env_checker=True)
register(id="agent_rl/WordCount-v0", entry_point="envs.examples.word_count_env:load_environment",
         disable_env_checker=True)
register(id="agent_rl/Parity-v0", entry_point="envs.examples.parity_env:ParityEnv",
         disable_env_checker=True)

ENV_IDS: tuple[str, ...] = (
    "agent_rl/PythonTool-v0",
    "agent_rl/Desktop-v0",
    "agent_rl/DesktopGen-v0",
    "agent_rl/WordCount-v0",
    "agent_rl/Parity-v0",
)
