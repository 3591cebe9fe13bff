"""Desktop demonstrations for SFT: `agent-rl sft` with `env.id: agent_rl/DesktopGen-v0` has the
desktop's scripted oracle play generated train tasks, and trains only on the oracle's turns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from agent_rl.learn.sft import build_demonstrations
from agent_rl.learn.sft_config import SFTConfig, load_sft_config
from envs.desktop.apps import APT_PACKAGES
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.generate import generate_tasks
from envs.tool_calls import parse_tool_calls

_missing = [program for program in (*REQUIRED_PROGRAMS, "xfce4-terminal", "xlogo", "xclock",
                                    "xeyes", "xload") if not shutil.which(program)]
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"desktop programs missing: "
                                f"{', '.join(_missing)} (apt-get install -y --no-install-recommends "
                                f"{APT_PACKAGES})")

CONFIG = Path(__file__).parents[2] / "configs" / "sft_desktop.yaml"


def test_the_oracle_plays_generated_train_tasks_and_only_its_turns_are_trained_on(
        tiny_model: Path, tmp_path: Path) -> None:
    config = load_sft_config(CONFIG, {"out_dir": str(tmp_path), "model": "tiny",
                                      "demos_per_category": 1,
                                      "env.kwargs.categories": ["terminal", "window"]})
    assert isinstance(config, SFTConfig) and config.env.id == "agent_rl/DesktopGen-v0"
    dataset, dropped = build_demonstrations(config, tiny_model)
    rows = dataset.to_list()
    train_ids = {task["id"] for task in generate_tasks("train")}
    assert not dropped and len(rows) == 2
    assert {row["category"] for row in rows} == {"terminal", "window"}
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for row in rows:
        assert row["task_id"] in train_ids and row["reward"] == 1.0
        mask = row["loss_mask"]
        assert mask[0] == 0 and 0 < sum(mask) < len(mask)
        trained = [tokenizer.decode([token for token, keep in zip(row["token_ids"], mask,
                                                                  strict=True) if keep == flag])
                   for flag in (1, 0)]
        model_text, env_text = trained
        calls = parse_tool_calls(model_text).calls
        assert calls[-1].name == "DONE" and {"CLICK"} & {call.name for call in calls}
        assert "The screen now:" in env_text and "The screen now:" not in model_text
        assert "<|im_start|>" not in model_text
