"""Episodes played by a user's own agent through the OpenAI-compatible endpoint.

An agent is an async function `run(task, client) -> reward` named as "module:function": it gets
a task row and an `openai.AsyncOpenAI` client whose base URL is its episode's, and returns a
float or a `Verdict`. It is the agent's own business how it calls tools. Each episode's agent
runs on a thread with its own event loop, never on the engine's: a blocking client there would
stall the decoding of every episode. An agent that raises, makes no request or overruns its
time limit ends its episode as an env error, like an env that raises in the env loop.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from agent_rl.errors import UserError
from agent_rl.rollout.openai_server import OpenAIEndpoint
from agent_rl.trajectory import END_ENV_ERROR, Group, Trajectory
from envs.verifiers import Verdict, as_verdict

if TYPE_CHECKING:
    from agent_rl.rollout.actor import RolloutActor

logger = logging.getLogger(__name__)

Agent = Callable[[dict[str, Any], Any], Awaitable["float | bool | Verdict"]]


class AgentLoadError(UserError, ValueError):
    """An agent spec that names no async function."""


class AgentEpisodeError(RuntimeError):
    """Why an agent's episode has no reward: it raised, made no request or ran out of time."""


def load_agent(spec: str) -> Agent:
    """The async function `spec` ("package.module:function") names."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise AgentLoadError(f"agent {spec!r} is not 'module:function' (e.g. my_agent:run)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AgentLoadError(f"agent {spec!r}: cannot import {module_name!r} ({error}); is it "
                             "on PYTHONPATH?") from error
    agent = getattr(module, name, None)
    if not asyncio.iscoroutinefunction(agent):
        raise AgentLoadError(f"agent {spec!r}: {module_name}.{name} must be an async function "
                             "`async def run(task, client) -> float`")
    return agent


class AgentEpisodes:
    """Plays groups of a task with `agent`, recording them through `endpoint`.

    Args:
        actor: the started rollout actor the endpoint serves (its seeds and sampling record).
        endpoint: a started endpoint on the actor's event loop.
        agent: the agent function (see `load_agent`).
        time_limit_s: most seconds one episode's agent may run, counted from its submission.
        threads: most agents running at once; give one per episode in flight, since an episode
            waiting for a thread spends its time limit.
    """

    def __init__(self, actor: RolloutActor, endpoint: OpenAIEndpoint, agent: Agent, *,
                 time_limit_s: float = 600.0, threads: int = 64) -> None:
        self.actor = actor
        self.endpoint = endpoint
        self.agent = agent
        self.time_limit_s = time_limit_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="agent")
        self._groups = 0

    async def play_group(self, task: dict[str, Any], group_size: int,
                         group_seed: int | None = None, group_id: str | None = None) -> Group:
        """`group_size` episodes of `task` at once, seeded as the actor seeds its env groups."""
        stream = self._groups if group_seed is None else group_seed
        self._groups += 1
        group_id = group_id or f"{self.actor.name}-agent-g{stream}-{uuid.uuid4().hex[:6]}"
        episodes = [self._play(task, group_id, self.actor.episode_seed(stream, index))
                    for index in range(group_size)]
        trajectories = [trajectory for segments in await asyncio.gather(*episodes)
                        for trajectory in segments]
        return Group(group_id=group_id, task_id=str(task.get("task_id", "")),
                     trajectories=trajectories)

    def shutdown(self) -> None:
        """Stop taking episodes; agents still running are left to finish on their threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _play(self, task: dict[str, Any], group_id: str,
                    seed: int | None) -> list[Trajectory]:
        key = self.endpoint.open_episode(str(task.get("task_id", "")),
                                         str(task.get("category", "")), seed=seed)
        base_url = self.endpoint.base_url(key)
        loop = asyncio.get_running_loop()
        try:
            result = await asyncio.wait_for(
                loop.run_in_executor(self._pool, _run_agent, self.agent, task, base_url),
                self.time_limit_s)
            verdict = as_verdict(result)
            if self.endpoint.turns(key) == 0:
                raise AgentEpisodeError("the agent returned without calling the endpoint")
        except Exception as error:  # noqa: BLE001 - any agent failure ends only its episode
            return self._failed(key, group_id, self.endpoint.fault(key) or error, task)
        if (fault := self.endpoint.fault(key)) is not None:
            return self._failed(key, group_id, fault, task)
        return self.endpoint.finish_episode(key, verdict.reward, group_id,
                                            {"verdict": verdict.to_dict()})

    def _failed(self, key: str, group_id: str, error: Exception,
                task: dict[str, Any]) -> list[Trajectory]:
        if isinstance(error, TimeoutError):
            error = AgentEpisodeError(f"the agent ran past its time limit of "
                                      f"{self.time_limit_s:g} s")
        logger.warning("agent episode of task %s ended by error: %r", task.get("task_id"), error)
        cause = type(error)
        return self.endpoint.finish_episode(
            key, 0.0, group_id,
            {"error": f"agent raised {error!r}",
             "error_type": f"{cause.__module__}.{cause.__qualname__}"},
            end_reason=END_ENV_ERROR)


def _run_agent(agent: Agent, task: dict[str, Any], base_url: str) -> float | bool | Verdict:
    """One agent episode on this thread's own event loop, with its own client."""
    import openai

    async def main() -> float | bool | Verdict:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="agent-rl",
                                      max_retries=0) as client:
            return await agent(dict(task), client)

    return asyncio.run(main())
