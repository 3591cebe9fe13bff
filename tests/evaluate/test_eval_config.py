"""The held-out protocol is a run config's `evaluation:` section, played by `eval --config`."""

from __future__ import annotations

from agent_rl.evaluate.config import eval_options
from agent_rl.train_config import load_train_config


def test_the_main_jobs_protocol_comes_from_its_config() -> None:
    options = eval_options(load_train_config("configs/demo.yaml"))
    assert options["env_id"] == "agent_rl/PythonTool-v0" and options["split"] == "heldout"
    assert (options["k"], options["limit_per_category"], options["max_concurrent_episodes"]) == (
        1, 16, 64)
    assert (options["max_tokens_per_turn"], options["max_turns"]) == (160, 4)
    assert options["env_kwargs"] == {"categories": ["arithmetic", "strings", "lists", "dates"]}
    assert options["dtype"] == "float32"


def test_a_config_carries_its_own_protocol_and_dtype() -> None:
    desktop = eval_options(load_train_config("configs/desktop_rl.yaml"))
    assert desktop["env_id"] == "agent_rl/DesktopGen-v0" and desktop["max_turns"] == 5
    assert (desktop["context_budget"], desktop["max_concurrent_episodes"]) == (7168, 16)
    assert eval_options(load_train_config("configs/lag64.yaml"))["dtype"] == "bfloat16"
    shorter = load_train_config("configs/demo.yaml", overrides={"evaluation.limit_per_category": 2})
    assert eval_options(shorter)["limit_per_category"] == 2
