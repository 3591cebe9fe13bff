"""The smallest real run the pipeline tests train: the tiny model on Parity, 2 groups of 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_rl.fault_config import FaultConfig
from agent_rl.train_config import TrainConfig


def tiny_run_config(out_dir: Path, faults: FaultConfig | None = None,
                    learner: dict[str, Any] | None = None, **pipeline: Any) -> TrainConfig:
    """Sync, 4 updates, a checkpoint every 2; `learner` and `pipeline` keys override."""
    return TrainConfig.model_validate({
        "model": "tiny",
        "seed": 7,
        "out_dir": out_dir,
        # Rewards a random model earns half the time: groups vary, so the learner really steps.
        "env": {"id": "agent_rl/Parity-v0",
                "kwargs": {"categories": ["arithmetic"], "max_turns": 2}},
        "rollout": {"group_size": 2, "max_tokens_per_turn": 16},
        "engine": {"max_model_len": 512, "kv_cache_gib": 0.25},
        "learner": {"lr": 1e-4, **(learner or {})},
        "pipeline": {"groups_per_update": 2, "max_lag": 0, "num_updates": 4,
                     "checkpoint_every": 2, "stall_timeout_s": 300.0, **pipeline},
        "faults": faults or FaultConfig(),
    })
