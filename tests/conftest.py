"""Session-wide fixtures: the tiny real model, built once and cached under AGENT_RL_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_rl.model_store import tiny_model_dir


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """A random-weight 2-layer Llama with the default tokenizer, as a real HF checkpoint."""
    return tiny_model_dir()


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance for one test module, shut down when the module is done."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()
