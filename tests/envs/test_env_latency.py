"""Env latency profiles: the spec strings, the wrapper's seeded draws, and the run config."""

from __future__ import annotations

import json

import pytest

from agent_rl.config import ConfigError, validate_config
from agent_rl.env_config import EnvConfig
from envs.latency import LatencySpecError, StepLatency, parse_latency
from envs.loading import make_env


def test_the_three_forms_parse(tmp_path):
    assert parse_latency("fixed:0.25").draw(None) == 0.25  # type: ignore[arg-type]
    lognormal = parse_latency("lognormal:2.0,1.0")
    assert (lognormal.kind, lognormal.mean_s, lognormal.sigma) == ("lognormal", 2.0, 1.0)
    trace = tmp_path / "steps.json"
    trace.write_text(json.dumps([0.5, 1.5]))
    assert parse_latency(f"trace:{trace}").mean == 1.0


@pytest.mark.parametrize("spec", ["2.5", "fixed:", "lognormal:2", "fixed:-1", "uniform:1,2",
                                  "trace:/nonexistent.json"])
def test_a_bad_profile_names_the_forms_that_work(spec):
    with pytest.raises(LatencySpecError, match="fixed:SECONDS|must not be negative"):
        parse_latency(spec)


def test_lognormal_draws_keep_their_mean_and_repeat_with_the_seed():
    import random

    latency = parse_latency("lognormal:2.0,1.0")
    draws = [latency.draw(random.Random(seed)) for seed in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(2.0, rel=0.1)
    assert latency.draw(random.Random(7)) == latency.draw(random.Random(7))


def test_make_env_wraps_the_env_and_every_step_says_what_it_waited():
    env = make_env("agent_rl/Parity-v0", split="train", step_latency="fixed:0.01")
    assert isinstance(env, StepLatency)
    env.reset(seed=3, options={"task": 0})
    *_, info = env.step("ab")
    assert info["env_latency_s"] == 0.01 and info["env_latency_total_s"] == 0.01
    env.close()


def test_the_run_config_refuses_a_bad_profile_before_anything_starts():
    config = validate_config({"step_latency": "lognormal:1.0,0.5"}, EnvConfig)
    assert config.make_kwargs("train")["step_latency"] == "lognormal:1.0,0.5"
    with pytest.raises((ConfigError, LatencySpecError), match="fixed:SECONDS"):
        validate_config({"step_latency": "slow"}, EnvConfig)
