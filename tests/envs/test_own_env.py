"""Your own environment, end to end, exactly as the README's recipe says: the env module is the
README's code block, written to an empty folder, and the README's commands run from there:
`env run` plays its tasks, `train` trains on its train tasks (never the shipped ones) and `eval`
scores its held-out ones. Contract breaches are one clear error before anything starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envs.loading import EnvContractError, env_tasks, make_env

ROOT = Path(__file__).resolve().parents[2]


def _readme_env_module() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r'```python\n("""unit_conv\.py.*?)```', readme, re.S)
    assert len(blocks) == 1, "the README's unit_conv.py recipe is missing or duplicated"
    return blocks[0]


@pytest.fixture
def env_folder(tmp_path: Path) -> Path:
    """An empty folder holding only the README's unit_conv.py, as a new user would have it."""
    (tmp_path / "unit_conv.py").write_text(_readme_env_module())
    return tmp_path


def _agent_rl(folder: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    # PYTHONPATH as a user's shell has it: the repo's own packages come from the install.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "agent_rl.cli.main", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _train_and_heldout_ids(folder: Path) -> tuple[set[str], set[str]]:
    sys.path.insert(0, str(folder))
    try:
        train = {row["task_id"] for row in env_tasks("unit_conv:you/UnitConv-v0", "train")}
        heldout = {row["task_id"] for row in env_tasks("unit_conv:you/UnitConv-v0", "heldout")}
    finally:
        sys.path.remove(str(folder))
    return train, heldout


def test_the_oracle_plays_an_env_of_your_own(env_folder: Path) -> None:
    done = _agent_rl(env_folder, "env", "run", "unit_conv:you/UnitConv-v0", "--task", "len-0",
                     "--policy", "oracle", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reward 1" in done.stdout


@pytest.mark.slow
def test_train_and_eval_use_the_envs_own_tasks(env_folder: Path) -> None:
    train_ids, heldout_ids = _train_and_heldout_ids(env_folder)
    assert train_ids and heldout_ids and not train_ids & heldout_ids
    done = _agent_rl(env_folder, "train", str(ROOT / "configs" / "smoke.yaml"),
                     "--set", "env.id=unit_conv:you/UnitConv-v0", "--set", "out_dir=run",
                     "--set", "pipeline.num_updates=2",
                     "--set", "rollout.max_tokens_per_turn=24")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    records = [json.loads(line) for line in (env_folder / "run" / "metrics.jsonl").open()]
    trained = {task for record in records for task in record["groups/task_ids"]}
    assert len(records) == 2 and trained and trained <= train_ids

    done = _agent_rl(env_folder, "eval", "--model", "run", "--tasks",
                     "unit_conv:you/UnitConv-v0", "--k", "1", "--max-tokens-per-turn", "24",
                     "--max-turns", "2", "--out", "eval")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads((env_folder / "eval" / "report.json").read_text())
    assert {task["task_id"] for task in report["tasks"]} == heldout_ids


def test_an_env_without_a_split_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "no_split.py").write_text(
        "import gymnasium\nfrom envs.tool_env import ToolEnv\n\n"
        "def load_environment(**kwargs):\n"
        "    return ToolEnv([{'prompt': 'p', 'answer': 'a'}], tools=[], **kwargs)\n\n"
        "gymnasium.register(id='you/NoSplit-v0', entry_point='no_split:load_environment')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(EnvContractError, match="takes no `split` argument"):
            env_tasks("no_split:you/NoSplit-v0", "train")
    finally:
        sys.path.remove(str(tmp_path))


def test_an_unknown_env_names_the_nearest_registered_one() -> None:
    with pytest.raises(EnvContractError, match="did you mean 'agent_rl/PythonTool-v0'"):
        make_env("agent_rl/PythonTol-v0")
    with pytest.raises(EnvContractError, match="cannot import module 'not_a_module'"):
        make_env("not_a_module:you/X-v0")


def test_the_shipped_examples_keep_their_tasks_per_split() -> None:
    for env_id in ("agent_rl/WordCount-v0", "agent_rl/Parity-v0"):
        train = {row["task_id"] for row in env_tasks(env_id, "train")}
        heldout = {row["task_id"] for row in env_tasks(env_id, "heldout")}
        assert train and heldout and not train & heldout, env_id
