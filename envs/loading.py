"""Making any registered environment by id, and reading its tasks: the contract every env meets.

The contract (what `agent-rl train`, `eval` and `env run` rely on):
- The env is registered with Gymnasium, `register(id="you/MyEnv-v0", entry_point=...)`, in a
  module that a run can import. An id written `module:you/MyEnv-v0` imports `module` first, so a
  user's env needs no change to agent-rl.
- Its entry point takes `split` ("train" or "heldout") and builds that split's tasks; every other
  keyword is the env's own (`gymnasium.make(id, split=..., **env_kwargs)`).
- The built env (`env.unwrapped`) has `dataset`: the split's tasks, rows with at least `prompt`
  and `answer` (a `ToolEnv` keeps its dataset there), so training draws the env's own tasks and
  evaluation scores its own held-out ones. `reset(options={"task": row})` plays a given row.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import Any

import gymnasium

from envs import registration  # noqa: F401 - registers the agent_rl/* environment ids
from envs.errors import EnvsError
from envs.format_penalty import FormatPenalty
from envs.latency import StepLatency

SPLITS = ("train", "heldout")
CONTRACT = ("an env's entry point takes split='train'|'heldout' and the env keeps that split's "
            "tasks in `dataset` (README: Your own environment)")


class EnvContractError(EnvsError, ValueError):
    """An env id that cannot be made, or an env that does not meet the contract above."""


def import_env_module(module: str) -> None:
    """Import a module that registers envs (its `register` calls run on import).

    A module in the current folder is found as `python -m` would find it, and the folder goes
    on PYTHONPATH too, so that the processes a run starts (Ray's rollout workers) find it.
    """
    try:
        importlib.import_module(module)
        return
    except ModuleNotFoundError as error:
        if error.name != module.split(".")[0] or os.getcwd() in sys.path:
            raise EnvContractError(f"cannot import module {module!r} ({error})") from error
    sys.path.insert(0, os.getcwd())
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise EnvContractError(
            f"cannot import module {module!r} ({error}); run from the folder that holds it or "
            "put it on PYTHONPATH") from error


def resolve_env_id(env_id: str) -> str:
    """The registered id for `env_id`, importing the module of a `module:id` first."""
    module, _, name = env_id.rpartition(":")
    if module:
        import_env_module(module)
    if name not in gymnasium.registry:
        nearest = difflib.get_close_matches(name, list(gymnasium.registry), n=1)
        hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
        raise EnvContractError(
            f"no environment {name!r} is registered{hint}. An env of your own is found as "
            "'module:id', where importing module registers it (e.g. my_env:you/MyEnv-v0)")
    return name


def make_env(env_id: str, *, step_latency: str | None = None, format_penalty: float = 0.0,
             **kwargs: Any) -> gymnasium.Env:
    """`gymnasium.make` for a registered id or `module:id`; a wrong keyword is a clear error.
    `step_latency` (see `envs.latency`) makes every step wait that long; `format_penalty` (see
    `envs.format_penalty`) charges each turn that runs no tool."""
    name = resolve_env_id(env_id)
    try:
        env = gymnasium.make(name, **kwargs)
        if format_penalty:
            env = FormatPenalty(env, format_penalty)
        return StepLatency(env, step_latency) if step_latency else env
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        entry = gymnasium.spec(name).entry_point
        if "argument 'split'" in str(error):
            raise EnvContractError(
                f"env {env_id!r} ({entry}) takes no `split` argument, so its training tasks "
                f"cannot be told from its held-out ones; {CONTRACT}") from error
        raise EnvContractError(
            f"env {env_id!r} ({entry}) does not take these arguments {sorted(kwargs)}: "
            f"{error}") from error


def env_tasks(env_id: str, split: str, **kwargs: Any) -> list[dict[str, Any]]:
    """The tasks of one split of an env, read from the env itself."""
    if split not in SPLITS:
        raise EnvContractError(f"split {split!r} is not one of {SPLITS}")
    env = make_env(env_id, split=split, **kwargs)
    try:
        dataset = getattr(env.unwrapped, "dataset", None)
        if dataset is None:
            raise EnvContractError(f"env {env_id!r} has no `dataset` of tasks; {CONTRACT}")
        rows = [dict(row) for row in dataset]
    finally:
        env.close()
    if not rows:
        raise EnvContractError(f"env {env_id!r} has no {split} tasks (with {kwargs or 'defaults'})")
    return rows


def registered_env_ids() -> list[str]:
    """Every registered env that is not one of Gymnasium's own examples: ours and the user's."""
    ids = []
    for env_id, spec in gymnasium.registry.items():
        entry = spec.entry_point if isinstance(spec.entry_point, str) else (
            f"{spec.entry_point.__module__}:{spec.entry_point.__qualname__}")
        if not entry.startswith(("gymnasium.", "shimmy.", "ale_py.")):
            ids.append(env_id)
    return sorted(ids)
