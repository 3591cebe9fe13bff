"""The rollout actor: one vLLM engine stepping many tool-use episodes at once.

Each episode is a coroutine (`agent_rl.rollout.episode.run_episode`) that asks this actor's
engine for one assistant turn at a time; the actor runs many at once. The sampled ids, their
behavior logprobs and the weight version that sampled each of them come straight from the
engine; nothing is re-tokenized.

Lag. Versions only grow during an episode, so a group's oldest token has the version the actor
had when the group started. Which groups may start, and which are too old to train on, is the
scheduler's decision (`agent_rl.orchestrate.scheduler`); the actor samples what it is given.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agent_rl.rollout.config import RolloutConfig
from agent_rl.rollout.engine import EngineConfig, build_engine, engine_config_metadata
from agent_rl.rollout.episode import (
    EnvFactory,
    EnvThreads,
    SampledTurn,
    run_episode,
)
from agent_rl.rollout.time_use import TimeUse
from agent_rl.rollout.weight_sync import WeightUpdateTiming, WeightVersionError, update_engine_weights
from agent_rl.trajectory import (
    Group,
    Trajectory,
)

if TYPE_CHECKING:
    from agent_rl.rollout.agents import AgentEpisodes

logger = logging.getLogger(__name__)

class RolloutActor:
    """Owns one AsyncLLM engine and samples groups of episodes with it.

    Use it in-process (`actor = RolloutActor(...); await actor.start()`) or as a Ray actor
    (`make_rollout_actor`). All public methods are coroutines so both uses read the same.

    Args:
        engine_config: how the vLLM engine is built.
        rollout_config: how episodes are sampled.
        env_factory: builds one fresh environment per episode; default
            `gymnasium.make(rollout_config.env_id, **rollout_config.env_kwargs)`.
        name: prefix of group ids, unique per actor.
        initial_version: the policy version of the checkpoint the engine starts from.
    """

    def __init__(
        self,
        engine_config: EngineConfig,
        rollout_config: RolloutConfig | None = None,
        env_factory: EnvFactory | None = None,
        name: str = "rollout-0",
        initial_version: int = 0,
    ) -> None:
        self.engine_config = engine_config
        self.config = rollout_config or RolloutConfig()
        self.name = name
        self._env_factory = env_factory or self._make_gymnasium_env
        self._policy_version = initial_version
        self._loading = False  # a weight load is under way (see `cache_salt`)
        self._update_lock = asyncio.Lock()
        self._group_serial = itertools.count()
        self._env_threads = EnvThreads(self.config.env_threads)
        self._time = TimeUse()
        self._engine: Any = None
        self._agent_episodes: AgentEpisodes | None = None
        self._tokenizer: Any = None
        self._context_budget = self.config.context_budget

    async def start(self) -> dict[str, Any]:
        """Build the engine (a few seconds to a minute) and label its weights; idempotent."""
        if self._engine is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.engine_config.model)
            self._engine = build_engine(self.engine_config)
            await self._engine.update_weight_version(str(self._policy_version))
            max_model_len = self._engine.model_config.max_model_len
            self._context_budget = min(self.config.context_budget, max_model_len)
            if self._context_budget < self.config.context_budget:
                logger.info(
                    "context budget %d clamped to the engine's max_model_len %d",
                    self.config.context_budget,
                    max_model_len,
                )
        return self.metadata()

    def metadata(self) -> dict[str, Any]:
        """Engine and sampling settings, for the run's metadata."""
        return {
            "engine": engine_config_metadata(self.engine_config),
            "rollout": self.config.model_dump(),
            "context_budget": self._context_budget,
        }

    @property
    def policy_version(self) -> int:
        return self._policy_version

    @property
    def tokenizer(self) -> Any:
        """The checkpoint's Hugging Face tokenizer (after `start`)."""
        return self._tokenizer

    @property
    def context_budget(self) -> int:
        """The episode token budget in force (the config's, clamped to max_model_len)."""
        return self._context_budget

    async def get_policy_version(self) -> int:
        """The version of the weights the engine samples with now (for Ray callers)."""
        return self._policy_version

    async def update_weights(
        self,
        version: int,
        weights: dict[str, torch.Tensor] | str | Path,
    ) -> WeightUpdateTiming:
        """Load new weights while episodes run; tokens sampled afterwards carry `version`.

        `weights` is a CPU state dict under HF names (through Ray: pass the ObjectRef from
        `ray.put` as the argument and Ray hands the actor the dict), or a
        checkpoint folder.
        """
        await self.start()
        async with self._update_lock:
            if version <= self._policy_version:
                raise WeightVersionError(
                    f"weight version {version} is not newer than the actor's {self._policy_version}"
                    "; versions must grow with every update"
                )
            self._loading = True
            try:
                timing = await update_engine_weights(self._engine, version, weights)
                # No await between the engine's resume and here: a request submitted after the
                # load sees the new version and salt, one submitted during it a private salt.
                self._policy_version = version
            finally:
                self._loading = False
        return timing

    def cache_salt(self, request_id: str) -> str:
        """The prefix-cache key a request submitted now shares KV under.

        Requests of one weight version share KV. A request submitted while weights load may be
        prefilled by either version, so it shares with nobody: under a version's salt its old-weight
        KV would serve that version's later requests, whose tokens the learner then scores with
        context it never computed (the nonzero `is/lag0_max_abs_log` of the main job).
        """
        if self._loading:
            return f"loading-{request_id}"
        return f"policy-{self._policy_version}"

    async def generate_group(
        self, task: dict[str, Any] | None, group_size: int | None = None,
        group_seed: int | None = None, group_id: str | None = None,
    ) -> Group:
        """Sample `group_size` episodes of one task concurrently: in the env, or played by the
        config's own agent through this actor's OpenAI-compatible endpoint.

        `group_seed` names the group's random stream (with a seeded config): the trainer passes
        the task position, so a resumed run, whose actors count groups from 0 again, samples a
        position exactly as the unbroken run did. Default: this actor's group counter.
        `group_id` is the name the caller's ledger knows the group by; default: a fresh one.
        """
        await self.start()
        size = group_size or self.config.group_size
        if self.config.agent is not None:
            players = await self._agent_players()
            return await players.play_group(task or {}, size, group_seed, group_id)
        serial = next(self._group_serial)
        group_id = group_id or f"{self.name}-g{serial}-{uuid.uuid4().hex[:6]}"
        stream = serial if group_seed is None else group_seed
        episodes = [
            self._run_episode(task, group_id, self.episode_seed(stream, index))
            for index in range(size)
        ]
        trajectories = list(await asyncio.gather(*episodes))
        task_id = trajectories[0].task_id if trajectories else str((task or {}).get("task_id", ""))
        return Group(group_id=group_id, task_id=task_id, trajectories=trajectories)

    async def sample(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        seed: int | None = None,
        min_tokens: int = 0,
        temperature: float | None = None,
        on_tokens: Callable[[list[int]], None] | None = None,
        top_logprobs: int = 0,
    ) -> SampledTurn:
        """Sample one continuation of `prompt_ids` with the rollout's sampling settings.

        `on_tokens` is called with the ids sampled so far each time the engine reports some
        (for streaming); the turn returned is the same either way. `top_logprobs`: also the
        most likely alternatives at each position, as many (the engine's processed logprobs,
        the distribution the token was drawn from).
        """
        await self.start()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=max_tokens,
            min_tokens=min(min_tokens, max_tokens),
            temperature=self.config.temperature if temperature is None else temperature,
            top_p=self.config.top_p,
            top_k=self.config.top_k,
            seed=seed,
            logprobs=top_logprobs,
            output_kind=(RequestOutputKind.FINAL_ONLY if on_tokens is None
                         else RequestOutputKind.CUMULATIVE),
        )
        prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        request_id = self._request_id()
        submitted = None if self._loading else self._policy_version
        if self.engine_config.enable_prefix_caching:
            prompt["cache_salt"] = self.cache_salt(request_id)
        final = None
        async for output in self._engine.generate(prompt, params, request_id=request_id):
            final = output
            if on_tokens is not None:
                on_tokens(list(output.outputs[0].token_ids))
        assert final is not None
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs = [completion.logprobs[i][tok].logprob for i, tok in enumerate(token_ids)]
        versions = token_versions(completion.weight_versions, len(token_ids),
                                  self._policy_version)
        stop_token = token_ids[-1] if completion.finish_reason == "stop" and token_ids else None
        if isinstance(completion.stop_reason, str):
            stop_token = None
        fresh = submitted is not None and (not versions or versions[0] == submitted)
        top = None
        if top_logprobs:
            top = [sorted(((token, entry.logprob) for token, entry in position.items()
                           if entry.rank is not None and entry.rank <= top_logprobs),
                          key=lambda pair: -pair[1])[:top_logprobs]
                   for position in completion.logprobs]
        return SampledTurn(
            token_ids, logprobs, versions, completion.finish_reason or "length", stop_token, fresh,
            top,
        )

    async def prompt_logprobs(
        self, token_ids: Sequence[int], temperature: float = 1.0
    ) -> list[float]:
        """Teacher-forced logprob of each token after the first, computed by this engine."""
        await self.start()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=1,
            temperature=temperature,
            prompt_logprobs=0,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        prompt = TokensPrompt(prompt_token_ids=list(token_ids))
        final = None
        async for output in self._engine.generate(prompt, params, request_id=self._request_id()):
            final = output
        assert final is not None and final.prompt_logprobs is not None
        return [final.prompt_logprobs[i][tok].logprob for i, tok in enumerate(token_ids) if i > 0]

    async def time_use(self) -> dict[str, float]:
        """Seconds decoding, waiting on envs and idle since this actor's first group."""
        return self._time.snapshot()

    async def shutdown(self) -> None:
        """Stop the agents' endpoint, the engine and the env threads."""
        if self._agent_episodes is not None:
            self._agent_episodes.shutdown()
            await self._agent_episodes.endpoint.stop()
            self._agent_episodes = None
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        self._env_threads.shutdown()

    async def _run_episode(
        self, task: dict[str, Any] | None, group_id: str, seed: int | None
    ) -> Trajectory:
        self._time.change(episodes=1)
        try:
            record = await run_episode(
                self.sample_turn, self._env_threads, self._env_factory, task, seed,
                tokenizer=self._tokenizer, context_budget=self._context_budget,
                pass_tools=self.config.pass_tools_to_template,
            )
        finally:
            self._time.change(episodes=-1)
        return record.to_trajectory(group_id, self.sampling_record(seed))

    async def sample_turn(self, token_ids: list[int], room: int, seed: int | None,
                          on_tokens: Callable[[list[int]], None] | None = None,
                          top_logprobs: int = 0) -> SampledTurn:
        """One assistant turn after `token_ids` with the rollout's per-turn limits, at most
        `room` tokens; the time it takes counts as sampling in `time_use`. `on_tokens` and
        `top_logprobs`: see `sample`."""
        self._time.change(sampling=1)
        try:
            return await self.sample(token_ids, seed=seed,
                                     max_tokens=min(self.config.max_tokens_per_turn, room),
                                     min_tokens=self.config.min_tokens_per_turn,
                                     on_tokens=on_tokens, top_logprobs=top_logprobs)
        finally:
            self._time.change(sampling=-1)

    def request_fault(self) -> BaseException | None:
        """An injected fault for the next request to this actor's endpoint, from a run's fault
        config (its env factory decides, counting requests as it counts env steps), or None."""
        due = getattr(self._env_factory, "request_fault", None)
        return due() if due is not None else None

    async def _agent_players(self) -> AgentEpisodes:
        """The endpoint and agent episodes, started with the first group (on this event loop,
        the engine's)."""
        if self._agent_episodes is None:
            from agent_rl.rollout.agents import AgentEpisodes, load_agent
            from agent_rl.rollout.openai_server import OpenAIEndpoint

            assert self.config.agent is not None
            agent = load_agent(self.config.agent)
            endpoint = OpenAIEndpoint(self)
            await endpoint.start()
            self._agent_episodes = AgentEpisodes(
                self, endpoint, agent, time_limit_s=self.config.agent_time_limit_s,
                threads=self.config.env_threads)
        return self._agent_episodes

    def _make_gymnasium_env(self) -> Any:
        from envs.loading import make_env

        return make_env(self.config.env_id, **self.config.env_kwargs)

    def episode_seed(self, group_serial: int, index: int) -> int | None:
        """The seed of episode `index` of group `group_serial` (None with an unseeded config)."""
        if self.config.seed is None:
            return None
        return (self.config.seed * 1_000_003 + group_serial * 4099 + index) % 2**31

    def _request_id(self) -> str:
        return f"{self.name}-{uuid.uuid4().hex}"

    def sampling_record(self, seed: int | None) -> dict[str, Any]:
        """How an episode with `seed` was sampled, as its trajectory records it."""
        return {
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "top_k": self.config.top_k,
            "max_tokens_per_turn": self.config.max_tokens_per_turn,
            "min_tokens_per_turn": self.config.min_tokens_per_turn,
            "context_budget": self._context_budget,
            "seed": seed,
            "logprobs_mode": self.engine_config.logprobs_mode,
            "dtype": self.engine_config.dtype,
            "model": self.engine_config.model,
        }


def token_versions(spans: Any, num_tokens: int, default: int) -> list[int]:
    """Per-token weight versions from vLLM's spans; vLLM labels every token it reports, so
    `default` (the actor's version) only fills an unlabeled output of 0 tokens."""
    versions = [default] * num_tokens
    for span in spans or ():
        versions[span.start : span.end] = [int(span.version)] * (span.end - span.start)
    return versions


def make_rollout_actor(
    engine_config: EngineConfig,
    rollout_config: RolloutConfig | None = None,
    env_factory: EnvFactory | None = None,
    name: str = "rollout-0",
    initial_version: int = 0,
    num_cpus: float = 1.0,
    multiprocessing: str = "1",
    max_restarts: int = 0,
    resources: dict[str, float] | None = None,
) -> Any:
    """Start a RolloutActor as a Ray actor; call `.start.remote()` and await it before use.

    `multiprocessing` is VLLM_ENABLE_V1_MULTIPROCESSING in the actor. AsyncLLM puts its engine
    core in a child process either way; "1" adds a core-bound worker process and decoded 2x
    faster than "0" on the CPU (see `engine.build_engine`). `max_restarts`: how often Ray
    restarts the actor after it dies; a restarted actor starts from `initial_version` again,
    so its owner must load the current weights into it (see `agent_rl.orchestrate.actor_pool`).
    `resources`: Ray custom resources the actor needs, which place it on the nodes that have them.
    """
    import ray

    remote_class = ray.remote(RolloutActor)
    return remote_class.options(
        name=name,
        num_cpus=num_cpus,
        max_concurrency=1000,
        max_restarts=max_restarts,
        resources=resources or None,
        runtime_env={"env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": multiprocessing}},
    ).remote(engine_config, rollout_config, env_factory, name, initial_version)
