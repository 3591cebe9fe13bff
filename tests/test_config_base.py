"""A run config may extend another (`base: demo.yaml`, relative to its own folder): mappings merge
key by key, other values replace the base's, bases chain, and a cycle, a missing base or an unknown
key is one error that names the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_rl.config import ConfigError, deep_merge
from agent_rl.train_config import load_train_config

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


BASE = """\
model: tiny
env:
  id: agent_rl/Parity-v0
  kwargs:
    categories: [arithmetic, dates]
    max_turns: 2
learner:
  lr: 1.0e-4
  warmup_updates: 2
pipeline:
  num_updates: 6
"""


def test_a_config_lays_its_keys_over_its_base_merging_mappings_key_by_key(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE)
    child = _write(tmp_path / "child.yaml", """\
base: base.yaml
env:
  kwargs:
    max_turns: 4
learner:
  lr: 3.0e-6
""")
    config = load_train_config(child)
    assert config.env.id == "agent_rl/Parity-v0"
    assert config.env.kwargs == {"categories": ["arithmetic", "dates"], "max_turns": 4}
    assert config.learner.lr == 3.0e-6 and config.learner.warmup_updates == 2
    assert config.pipeline.num_updates == 6 and config.model == "tiny"


def test_a_list_or_a_scalar_replaces_the_bases_value_whole() -> None:
    base = {"env": {"kwargs": {"categories": ["arithmetic", "dates"], "max_turns": 2}}, "seed": 1}
    override = {"env": {"kwargs": {"categories": ["lists"]}}, "seed": 2}
    assert deep_merge(base, override) == {
        "env": {"kwargs": {"categories": ["lists"], "max_turns": 2}}, "seed": 2}
    assert base["env"]["kwargs"]["categories"] == ["arithmetic", "dates"], "the base is unchanged"


def test_bases_chain_each_relative_to_the_folder_of_the_config_that_names_it(tmp_path: Path) -> None:
    _write(tmp_path / "root.yaml", BASE)
    _write(tmp_path / "family" / "middle.yaml", "base: ../root.yaml\nlearner:\n  lr: 5.0e-5\n")
    leaf = _write(tmp_path / "family" / "runs" / "leaf.yaml",
                  "base: ../middle.yaml\npipeline:\n  num_updates: 9\n")
    config = load_train_config(leaf)
    assert config.learner.lr == 5.0e-5
    assert config.learner.warmup_updates == 2
    assert config.pipeline.num_updates == 9
    assert config.env.id == "agent_rl/Parity-v0"


def test_set_overrides_apply_on_top_of_the_merged_config(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE)
    child = _write(tmp_path / "child.yaml", "base: base.yaml\nlearner:\n  lr: 3.0e-6\n")
    config = load_train_config(child, {"learner.lr": 7.0e-6, "env.kwargs.max_turns": 3})
    assert config.learner.lr == 7.0e-6
    assert config.env.kwargs == {"categories": ["arithmetic", "dates"], "max_turns": 3}


def test_a_cycle_of_bases_is_an_error_naming_the_files(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.yaml", "base: b.yaml\nseed: 1\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\nseed: 2\n")
    with pytest.raises(ConfigError, match="cycle") as error:
        load_train_config(first)
    assert "a.yaml -> " in str(error.value) and "b.yaml -> " in str(error.value)


def test_a_config_that_names_itself_as_its_base_is_a_cycle(tmp_path: Path) -> None:
    config = _write(tmp_path / "self.yaml", "base: ./self.yaml\nseed: 1\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_train_config(config)


def test_a_missing_base_is_an_error_naming_it_and_where_it_was_looked_for(tmp_path: Path) -> None:
    child = _write(tmp_path / "configs" / "child.yaml", "base: demo.yml\nseed: 1\n")
    with pytest.raises(ConfigError) as error:
        load_train_config(child)
    message = str(error.value)
    assert "child.yaml" in message and "demo.yml does not exist" in message
    assert str(tmp_path / "configs" / "demo.yml") in message


def test_a_base_that_is_not_a_file_name_is_an_error(tmp_path: Path) -> None:
    child = _write(tmp_path / "child.yaml", "base: [demo.yaml]\nseed: 1\n")
    with pytest.raises(ConfigError, match="must name another config file"):
        load_train_config(child)


def test_an_unknown_key_in_a_base_is_still_rejected_with_a_did_you_mean(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE.replace("  warmup_updates: 2", "  warmup_update: 2"))
    child = _write(tmp_path / "child.yaml", "base: base.yaml\nseed: 3\n")
    with pytest.raises(ConfigError) as error:
        load_train_config(child)
    message = str(error.value)
    assert "unknown key 'learner.warmup_update'" in message
    assert "did you mean 'warmup_updates'?" in message
    assert "child.yaml" in message and "base.yaml" in message


def test_an_unknown_key_in_the_extending_config_is_rejected_with_a_did_you_mean(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", BASE)
    child = _write(tmp_path / "child.yaml", "base: base.yaml\npipeline:\n  num_update: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'num_updates'"):
        load_train_config(child)


def test_the_learning_run_is_the_main_jobs_rl_with_its_stated_differences() -> None:
    demo = load_train_config(ROOT / "configs" / "demo.yaml").model_dump(mode="json")
    learning = load_train_config(ROOT / "configs" / "learning_curve.yaml").model_dump(mode="json")

    def differences(a: dict, b: dict, prefix: str = "") -> dict[str, tuple]:
        found: dict[str, tuple] = {}
        for key in a.keys() | b.keys():
            if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
                found |= differences(a[key], b[key], f"{prefix}{key}.")
            elif a.get(key) != b.get(key):
                found[f"{prefix}{key}"] = (a.get(key), b.get(key))
        return found

    assert differences(demo, learning) == {
        "out_dir": ("runs/demo/run", "runs/learning_curve"),
        "env.format_penalty": (0.1, 0.0),
        "learner.lr": (1.0e-5, 7.0e-6),
        "learner.warmup_updates": (4, 8),
        "pipeline.num_updates": (40, 300),
        "pipeline.groups_in_flight_per_actor": (4, 3),
        "pipeline.max_wall_s": (900.0, 3600.0),
    }
