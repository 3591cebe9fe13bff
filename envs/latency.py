"""Env latency on purpose: each `step` waits as long as a slow tool, a compiler or a desktop would.

Agentic RL waits on the world: an OSWorld step takes seconds, a tool calls a compiler or a web
service. `StepLatency` makes any env that slow without burning CPU (it sleeps), so pipelines,
benchmarks and simulators can be measured under the latency they will meet. A latency is
written as a string so that it fits a config or a command line:

- `fixed:2.5`: every step waits 2.5 s;
- `lognormal:2.5,1.0`: mean 2.5 s, sigma 1.0 of the underlying normal (a long tail);
- `trace:steps.json`: draws from recorded step times (a JSON list of seconds), e.g. the desktop
  env's measured steps.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium

from envs.errors import EnvsError


class LatencySpecError(EnvsError, ValueError):
    """A latency string that cannot be read, with the forms that can."""


FORMS = "fixed:SECONDS, lognormal:MEAN,SIGMA or trace:FILE.json"


@dataclass(frozen=True)
class Latency:
    """A distribution of step latencies in seconds."""

    kind: str  # "fixed", "lognormal" or "trace"
    mean_s: float = 0.0
    sigma: float = 0.0
    trace: tuple[float, ...] = ()

    def draw(self, rng: random.Random) -> float:
        if self.kind == "trace":
            return rng.choice(self.trace)
        if self.kind == "lognormal" and self.sigma > 0 and self.mean_s > 0:
            return rng.lognormvariate(math.log(self.mean_s) - self.sigma**2 / 2, self.sigma)
        return self.mean_s

    @property
    def mean(self) -> float:
        return sum(self.trace) / len(self.trace) if self.kind == "trace" else self.mean_s


@functools.lru_cache(maxsize=64)
def parse_latency(spec: str) -> Latency:
    """`fixed:2.5`, `lognormal:2.5,1.0` or `trace:FILE.json` as a `Latency`; read once per
    spec (every episode's env is wrapped, and a trace file need not be read each time).

    Raises:
        LatencySpecError: any other string, a negative time, or a trace that is not a
            non-empty JSON list of non-negative seconds.
    """
    kind, _, value = spec.partition(":")
    try:
        if kind == "fixed":
            latency = Latency("fixed", float(value))
        elif kind == "lognormal":
            mean, sigma = (float(part) for part in value.split(","))
            latency = Latency("lognormal", mean, sigma)
        elif kind == "trace":
            times = json.loads(Path(value).read_text())
            if not isinstance(times, list) or not times:
                raise LatencySpecError(f"trace {value} must be a non-empty JSON list of seconds")
            latency = Latency("trace", trace=tuple(float(t) for t in times))
        else:
            raise LatencySpecError(f"step latency {spec!r}: write {FORMS}")
    except (ValueError, OSError) as error:
        if isinstance(error, LatencySpecError):
            raise
        raise LatencySpecError(f"step latency {spec!r}: {error}; write {FORMS}") from error
    if min((latency.mean_s, latency.sigma, *latency.trace)) < 0:
        raise LatencySpecError(f"step latency {spec!r}: times must not be negative")
    return latency


class StepLatency(gymnasium.Wrapper):
    """Waits a drawn latency in every `step`; `info["env_latency_s"]` says how long, and
    `info["env_latency_total_s"]` how long in the whole episode so far.

    The wait is a sleep: the CPU stays free for the episodes that are not waiting. Draws are
    seeded by `reset(seed=...)` when a seed is given.
    """

    def __init__(self, env: gymnasium.Env, latency: Latency | str) -> None:
        super().__init__(env)
        self.latency = parse_latency(latency) if isinstance(latency, str) else latency
        self._rng = random.Random()
        self._total_s = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self._rng.seed(seed)
        self._total_s = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        wait = self.latency.draw(self._rng)
        time.sleep(wait)
        self._total_s += wait
        return observation, reward, terminated, truncated, {
            **info, "env_latency_s": wait, "env_latency_total_s": self._total_s}
