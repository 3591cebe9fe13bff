"""One episode, stepped: the loop between the sampler and a Gymnasium env.

Render the opening messages to ids once, sample an assistant turn from those ids, hand its text
to `env.step`, append the ids of the environment's reply as the chat template would write them,
and repeat until the episode ends or the context budget is reached. Env calls run on threads
(`EnvThreads`), so a slow tool never blocks the event loop that steps the other episodes; an env
that raises ends only its own episode (`END_ENV_ERROR`, with the error and its type in `info`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent_rl.rollout.chat_tokens import ChatTokens, EpisodeTokens
from agent_rl.trajectory import (
    END_CONTEXT_BUDGET,
    END_ENV_ERROR,
    END_TERMINATED,
    END_TRUNCATED,
    LAG0_EXCLUDED_TURNS,
    TOOL_CALLS,
    Trajectory,
)
from envs.tools import ANSWER_TOOL_NAME

logger = logging.getLogger(__name__)

EnvFactory = Callable[[], Any]


@dataclass
class SampledTurn:
    """One assistant turn as the engine sampled it."""

    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str
    stop_token: int | None
    # False when the prompt may have been prefilled by older weights than its first token's
    # (a weight load landed between submission and sampling): the learner then leaves the turn
    # out of its kernel-mismatch metric, since its context's KV is not its tokens' version's.
    fresh_context: bool = True
    # per token, the most likely (token id, logprob) pairs, most likely first: only when a
    # client asked for them (the OpenAI endpoint's `top_logprobs`); the learner never reads them
    top_logprobs: list[list[tuple[int, float]]] | None = None


# (episode ids so far, tokens of room left, turn seed) -> the sampled turn
SampleTurn = Callable[[list[int], int, "int | None"], Awaitable[SampledTurn]]


class EnvCallError(RuntimeError):
    """An environment call (make, reset, step, close) that raised; it ends only its episode."""


class EnvThreads:
    """The threads env calls run on; their failures become EnvCallError.

    Only env failures end an episode quietly: an engine failure propagates to the caller.
    """

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="env")

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))
        except Exception as error:
            name = getattr(fn, "__qualname__", repr(fn))
            raise EnvCallError(f"{name} raised {error!r}") from error

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def run_episode(
    sample_turn: SampleTurn,
    env_threads: EnvThreads,
    env_factory: EnvFactory,
    task: dict[str, Any] | None,
    seed: int | None,
    *,
    tokenizer: Any,
    context_budget: int,
    pass_tools: bool = True,
) -> EpisodeRecord:
    """Play one episode of `task` in a fresh env from `env_factory`; never raises for the env."""
    episode = EpisodeRecord(task_id=_task_id(task), category=_category(task))
    env = None
    try:
        env = await env_threads.call(env_factory)
        options = {"task": task} if task is not None else None
        messages, reset_info = await env_threads.call(env.reset, seed=seed, options=options)
        episode.adopt_reset_info(reset_info)
        tools = reset_info.get("tools") if pass_tools else None
        tokens = EpisodeTokens(ChatTokens(tokenizer, tools=tools), messages)
        await _step(sample_turn, env_threads, env, tokens, episode, seed, context_budget)
    except EnvCallError as error:
        logger.warning("episode of task %s ended by env error: %s", episode.task_id, error)
        episode.end_reason = END_ENV_ERROR
        episode.info["error"] = str(error)
        cause = type(error.__cause__ or error)
        episode.info["error_type"] = f"{cause.__module__}.{cause.__qualname__}"
    finally:
        if env is not None:
            try:
                await env_threads.call(env.close)
            except EnvCallError as error:
                logger.warning("closing an env failed: %s", error)
    return episode


async def _step(sample_turn: SampleTurn, env_threads: EnvThreads, env: Any,
                tokens: EpisodeTokens, episode: EpisodeRecord, seed: int | None,
                budget: int) -> None:
    episode.feed(tokens.opening_ids)
    while True:
        room = budget - len(episode.token_ids)
        if room <= 0:
            episode.end_reason = END_CONTEXT_BUDGET
            return
        turn = await sample_turn(episode.token_ids, room, turn_seed(seed, episode.num_turns))
        episode.append_sampled(turn)
        if turn.stop_token is None and len(episode.token_ids) >= budget:
            episode.end_reason = END_CONTEXT_BUDGET
            return
        text = tokens.add_assistant(turn.token_ids, turn.stop_token)
        env_messages, reward, terminated, truncated, info = await env_threads.call(env.step, text)
        episode.reward += float(reward)
        episode.adopt_step_info(info)
        if terminated or truncated:
            episode.end_reason = END_TERMINATED if terminated else END_TRUNCATED
            return
        reply_ids = tokens.add_env(env_messages)
        if len(episode.token_ids) + len(reply_ids) >= budget:
            episode.end_reason = END_CONTEXT_BUDGET
            return
        episode.feed(reply_ids)


def turn_seed(episode_seed: int | None, turn: int) -> int | None:
    """The sampling seed of an episode's `turn`-th assistant turn (from 0): every way of playing
    an episode uses it, so the same seed samples the same ids whoever drives the turns."""
    return None if episode_seed is None else (episode_seed * 7919 + turn) % 2**31


@dataclass
class EpisodeRecord:
    """The growing per-token record of one episode."""

    task_id: str
    category: str

    def __post_init__(self) -> None:
        self.token_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.behavior_logprobs: list[float] = []
        self.policy_versions: list[int] = []
        self.reward = 0.0
        self.num_turns = 0
        self.end_reason = END_ENV_ERROR
        self.info: dict[str, Any] = {}
        self.tool_calls = 0
        self.format_penalty = 0.0
        self.lag0_excluded_turn_starts: list[int] = []

    def adopt_step_info(self, info: dict[str, Any]) -> None:
        """The last step's info, plus the episode's totals (which the last step alone lacks)."""
        self.tool_calls += _tool_calls(info)
        self.format_penalty += float(info.get("format_penalty", 0.0))
        self.info = _public_info(info)

    def adopt_reset_info(self, info: dict[str, Any]) -> None:
        self.task_id = str(info.get("task_id", self.task_id))
        self.category = str(info.get("category", self.category))

    def feed(self, token_ids: Sequence[int]) -> None:
        """Prompt or environment tokens: not sampled, so no logprob, no version, no loss."""
        self.token_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.behavior_logprobs.extend([0.0] * len(token_ids))
        self.policy_versions.extend([-1] * len(token_ids))

    def truncate(self, length: int) -> None:
        """Drop the tokens past `length`: fed ones of a request its sender abandoned."""
        for tokens in (self.token_ids, self.loss_mask, self.behavior_logprobs,
                       self.policy_versions):
            del tokens[length:]

    def append_sampled(self, turn: SampledTurn) -> None:
        if not turn.fresh_context and turn.token_ids:
            self.lag0_excluded_turn_starts.append(len(self.token_ids))
        self.token_ids.extend(turn.token_ids)
        self.loss_mask.extend([1] * len(turn.token_ids))
        self.behavior_logprobs.extend(turn.logprobs)
        self.policy_versions.extend(turn.versions)
        self.num_turns += 1

    def trajectory_info(self) -> dict[str, Any]:
        info = {**self.info, TOOL_CALLS: self.tool_calls}
        if self.format_penalty:
            info["format_penalty_total"] = self.format_penalty
        if self.lag0_excluded_turn_starts:
            info[LAG0_EXCLUDED_TURNS] = list(self.lag0_excluded_turn_starts)
        return info

    def to_trajectory(self, group_id: str, sampling: dict[str, Any]) -> Trajectory:
        return Trajectory(
            task_id=self.task_id,
            group_id=group_id,
            token_ids=self.token_ids,
            loss_mask=self.loss_mask,
            behavior_logprobs=self.behavior_logprobs,
            policy_versions=self.policy_versions,
            reward=self.reward,
            num_turns=self.num_turns,
            end_reason=self.end_reason,
            category=self.category,
            info=self.trajectory_info(),
            sampling=sampling,
        )


def _task_id(task: dict[str, Any] | None) -> str:
    return str(task.get("task_id", "")) if task else ""


def _category(task: dict[str, Any] | None) -> str:
    return str(task.get("category", "")) if task else ""


def _tool_calls(info: dict[str, Any]) -> int:
    """Calls of tools other than the final `answer` in one step (a ToolEnv's `info["tool_calls"]`)."""
    calls = (info or {}).get("tool_calls") or []
    return sum(1 for call in calls
               if isinstance(call, dict) and call.get("name") != ANSWER_TOOL_NAME)


def _public_info(info: dict[str, Any]) -> dict[str, Any]:
    """The env's step info without the tool schemas, which every step would repeat."""
    return {key: value for key, value in dict(info or {}).items() if key != "tools"}
