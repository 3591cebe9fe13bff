"""Faults a run can inject on purpose, to prove that it survives them.

Two places inject. The driver (`FaultInjector`, asked by the pipeline after every update) kills a
rollout actor while its groups run, raises `LearnerKilled` out of the pipeline between two
updates, delays weight broadcasts, and holds the learner until the trajectory queue is full. The
rollout actors build their environments through `FaultyEnvFactory`, whose `FaultyEnv` wrapper
makes every Nth `env.step` raise, run code that hangs or kills its sandbox, or receive malformed
model output instead of what the model wrote. Every wrapped step reports the faults of its
episode in `info["injected_faults"]`, so the driver can count what was injected and what the
episode survived.

All of it is off by default; the `faults:` section of a run config switches it on (see
`FaultConfig`), and `agent_rl.diagnostics.soak` switches on random faults for a long run. A run with env
faults on trains on what they did (the env answered text the model did not write): use it to
test the pipeline, not to train a model you keep.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter
from typing import Any

import gymnasium

from agent_rl.errors import UserError
from agent_rl.fault_config import (
    DELAY_BROADCAST,
    DRIVER_FAULTS,
    ENV_FAULTS,
    ENV_RAISE,
    FILL_QUEUE,
    KILL_ACTOR,
    KILL_LEARNER,
    MALFORMED_OUTPUT,
    SANDBOX_HANG,
    SANDBOX_KILL,
    FaultConfig,
)

logger = logging.getLogger(__name__)

HANG_CODE = "import time\nwhile True:\n    time.sleep(1)"
KILL_CODE = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"


def python_call(code: str) -> str:
    """A well-formed Hermes-style call of the `python` tool, as a model would write it."""
    import json

    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


# Every kind of malformed model output the parser must turn into feedback, never an exception.
MALFORMED_OUTPUTS: dict[str, str] = {
    "no_tool_call": "I think the answer is probably somewhere around forty.",
    "broken_json": '<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>',
    "unknown_tool": '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>',
    "wrong_argument_type": '<tool_call>{"name": "python", "arguments": {"code": 42}}</tool_call>',
    "cut_by_token_budget": '<tool_call>{"name": "python", "arguments": {"code": "print(sum(ra',
    "non_utf8_bytes": "<tool_call>"
    + b'{"name": "python", "arguments": {"code": "print(\'\xff\xfe\')"}}'.decode(
        "utf-8", "surrogateescape"
    )
    + "</tool_call>",
    "one_megabyte_argument": python_call("x = '" + "a" * (1 << 20) + "'"),
    "empty": "",
}


class LearnerKilled(UserError, RuntimeError):
    """Injected: the learner 'died' between two updates; `agent-rl train` again resumes it."""


class InjectedEnvFault(RuntimeError):
    """Injected: an environment's `step` raised."""


def is_injected_error(info: dict[str, Any]) -> bool:
    """Whether an episode ended by an injected env fault (its info's `error_type`, which the
    rollout records) rather than a real one."""
    return info.get("error_type") == f"{InjectedEnvFault.__module__}.{InjectedEnvFault.__qualname__}"


class FaultInjector:
    """The driver's side: decides, after each update, which driver faults fire now.

    Deterministic faults fire at the update numbers the config names; random ones fire at most
    once per `random_every_s` seconds, chosen by a seeded RNG. `injected` and `recovered` count
    every fault by kind, for the run's `faults.json`.
    """

    def __init__(self, config: FaultConfig, clock: Any = time.monotonic) -> None:
        unknown = set(config.random_faults) - set(DRIVER_FAULTS)
        if unknown:
            raise ValueError(
                f"faults.random_faults names unknown faults {sorted(unknown)}; "
                f"choose from {list(DRIVER_FAULTS)}"
            )
        self.config = config
        self.clock = clock
        self.rng = random.Random(config.seed)
        self.injected: Counter[str] = Counter()
        self.recovered: Counter[str] = Counter()
        self._next_random = clock() + config.random_every_s
        self._delay_next_broadcast_s = 0.0

    def after_update(self, version: int) -> set[str]:
        """The driver faults to inject now that update `version` is done."""
        config = self.config
        due: set[str] = set()
        if version in config.kill_actor_at_updates:
            due.add(KILL_ACTOR)
        if version == config.kill_learner_at_update:
            due.add(KILL_LEARNER)
        if version in config.fill_queue_at_updates:
            due.add(FILL_QUEUE)
        if version in config.delay_broadcast_at_updates:
            due.add(DELAY_BROADCAST)
        if config.random_every_s and config.random_faults and self.clock() >= self._next_random:
            self._next_random = self.clock() + config.random_every_s
            due.add(self.rng.choice(config.random_faults))
        if DELAY_BROADCAST in due:
            self._delay_next_broadcast_s = config.random_delay_s
        return due

    def broadcast_delay_s(self) -> float:
        """How long to hold the weight broadcast that is about to go out."""
        delay = max(self.config.weight_broadcast_delay_s, self._delay_next_broadcast_s)
        self._delay_next_broadcast_s = 0.0
        return delay

    def count_episode(self, info: dict[str, Any]) -> None:
        """Count the env faults one finished episode reports.

        A step fault is recovered when the env answered it with a message for the model; an
        injected raise is recovered by the episode reaching the driver as a finished episode
        (ended "env_error") instead of the exception taking down the actor.
        """
        for fault in info.get("injected_faults", []):
            self.injected[fault["kind"]] += 1
            if fault["reply"].strip():
                self.recovered[fault["kind"]] += 1
        if is_injected_error(info):
            # The raising step never returned its info: the error text is the only trace.
            self.injected[ENV_RAISE] += 1
            self.recovered[ENV_RAISE] += 1

    def report(self) -> dict[str, Any]:
        return {"injected": dict(self.injected), "recovered": dict(self.recovered)}


class FaultyEnvFactory:
    """Builds the rollout's environments wrapped in `FaultyEnv`; picklable, so Ray ships it.

    One factory lives in each rollout actor; its step counter is shared by all the envs it
    builds, so "every Nth step" counts across the actor's concurrent episodes.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], config: FaultConfig) -> None:
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.config = config
        self._steps = itertools.count(1)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "env_kwargs": self.env_kwargs, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["env_id"], state["env_kwargs"], state["config"])

    def __call__(self) -> FaultyEnv:
        from envs.loading import make_env

        return FaultyEnv(make_env(self.env_id, **self.env_kwargs), self)

    def request_fault(self) -> InjectedEnvFault | None:
        """For an own agent's episode, whose requests stand in for env steps: `env_raise` fails
        the request (the config refuses the step faults an agent has no step for)."""
        if self.fault_for_next_step() == ENV_RAISE:
            return InjectedEnvFault(f"{InjectedEnvFault.__name__}: an agent's request failed on "
                                    "purpose")
        return None

    def fault_for_next_step(self) -> str | None:
        """Which env fault (if any) the next step of any of this actor's episodes gets."""
        with self._lock:
            step = next(self._steps)
        for kind in ENV_FAULTS:
            every = getattr(self.config, f"{kind}_every")
            if every and step % every == 0:
                return kind
        return None


class FaultyEnv(gymnasium.Wrapper):
    """An environment whose steps sometimes fail on purpose (see `FaultyEnvFactory`)."""

    def __init__(self, env: gymnasium.Env, factory: FaultyEnvFactory) -> None:
        super().__init__(env)
        self.factory = factory
        self.injected: list[dict[str, Any]] = []
        self._malformed = itertools.cycle(sorted(MALFORMED_OUTPUTS))

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.injected = []
        return self.env.reset(**kwargs)

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        kind = self.factory.fault_for_next_step()
        detail = ""
        if kind == ENV_RAISE:
            raise InjectedEnvFault(f"{InjectedEnvFault.__name__}: env.step raised on purpose")
        if kind == SANDBOX_HANG:
            action = python_call(HANG_CODE)
        elif kind == SANDBOX_KILL:
            action = python_call(KILL_CODE)
        elif kind == MALFORMED_OUTPUT:
            detail = next(self._malformed)
            action = MALFORMED_OUTPUTS[detail]
        start = time.perf_counter()
        messages, reward, terminated, truncated, info = self.env.step(action)
        if kind is not None:
            self.injected.append(
                {"kind": kind, "detail": detail, "step_s": round(time.perf_counter() - start, 3),
                 "reply": _reply_text(messages)[:200]}
            )
            logger.info("injected %s into an episode; the env answered %r", kind,
                        _reply_text(messages)[:120])
        info = {**info, "injected_faults": list(self.injected)}
        return messages, reward, terminated, truncated, info


def _reply_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(message.get("content", "")) for message in messages)
