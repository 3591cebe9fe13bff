"""The rollout actor's time split (decoding, waiting on envs, idle), on a clock the test moves."""

from __future__ import annotations

import pytest

from agent_rl.orchestrate.pipeline import rollout_time_shares
from agent_rl.rollout import time_use
from agent_rl.rollout.time_use import TimeUse


def test_time_is_booked_to_the_state_it_was_spent_in(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time_use.time, "monotonic", lambda: now[0])
    use = TimeUse()
    assert use.snapshot() == {"decoding_s": 0.0, "env_wait_s": 0.0, "idle_s": 0.0}
    use.change(episodes=2)  # the clock starts with the first episode, not at construction
    use.change(sampling=1)  # episode 1 decodes while episode 2 ...
    now[0] += 3.0
    use.change(sampling=1)  # ... starts decoding too
    now[0] += 1.0
    use.change(sampling=-2)  # both wait on their envs
    now[0] += 5.0
    use.change(episodes=-2)
    now[0] += 2.0
    assert use.snapshot() == {"decoding_s": 4.0, "env_wait_s": 5.0, "idle_s": 2.0}


def test_shares_add_up_and_an_unstarted_pool_reports_none() -> None:
    shares = rollout_time_shares({"decoding_s": 6.0, "env_wait_s": 3.0, "idle_s": 1.0})
    assert shares == pytest.approx({"rollout/decoding_share": 0.6,
                                    "rollout/env_wait_share": 0.3, "rollout/idle_share": 0.1})
    assert rollout_time_shares({"decoding_s": 0.0, "env_wait_s": 0.0, "idle_s": 0.0}) == {}
