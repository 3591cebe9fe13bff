"""What an evaluation runs on: held-out tasks kept apart from training, task selection, and
which weights a --model argument (checkpoint dir, run dir) resolves to."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from agent_rl.evaluate.runner import (
    EvalError,
    ResolvedModel,
    default_temperature,
    load_eval_tasks,
    resolve_eval_model,
    select_tasks,
)
from envs.tasks import load_tasks


def test_heldout_tasks_share_no_task_id_and_no_prompt_with_training_tasks():
    train, heldout = load_tasks(split="train"), load_tasks(split="heldout")
    assert len(train) > 0 and len(heldout) > 0
    assert not set(train["task_id"]) & set(heldout["task_id"])
    normalized = {" ".join(prompt.split()).lower() for prompt in train["prompt"]}
    leaked = [p for p in heldout["prompt"] if " ".join(p.split()).lower() in normalized]
    assert not leaked, f"held-out prompts also in training: {leaked[:3]}"


def test_eval_uses_the_envs_heldout_split_by_default():
    rows = load_eval_tasks(None, "heldout", "agent_rl/PythonTool-v0")
    assert [row["task_id"] for row in rows] == list(load_tasks(split="heldout")["task_id"])


def test_eval_reads_a_task_file_instead_of_the_env_tasks(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"prompt": "What is 2+2?", "answer": "4", "category": "mine"}\n')
    rows = load_eval_tasks(path, "heldout", "agent_rl/PythonTool-v0")
    assert [(row["category"], row["answer"]) for row in rows] == [("mine", "4")]


def test_limit_per_category_keeps_the_first_tasks_of_each_category_in_order():
    rows = [{"task_id": f"{c}-{i}", "category": c} for i in range(5) for c in ("a", "b")]
    chosen = select_tasks(rows, 2)
    assert [row["task_id"] for row in chosen] == ["a-0", "b-0", "a-1", "b-1"]
    assert select_tasks(rows, None) == rows
    with pytest.raises(EvalError):
        select_tasks(rows, 0)


def test_default_temperature_is_greedy_for_one_sample_and_one_for_several():
    assert default_temperature(1) == 0.0
    assert default_temperature(4) == 1.0


def test_a_checkpoint_dir_resolves_to_itself(tiny_model: Path):
    assert resolve_eval_model(tiny_model) == ResolvedModel(tiny_model, str(tiny_model))
    assert resolve_eval_model("tiny").model_dir == tiny_model


def _run_dir(tmp_path: Path, tiny_model: Path, versions: list[int], weights: dict) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"model": str(tiny_model)}))
    for version in versions:
        checkpoint = run_dir / "checkpoints" / f"update_{version:06d}"
        checkpoint.mkdir()
        torch.save({"model": weights, "version": version}, checkpoint / "learner.pt")
    return run_dir


def test_a_run_dir_means_its_latest_checkpoint_on_the_runs_base_model(tmp_path, tiny_model):
    weights = load_file(str(tiny_model / "model.safetensors"))
    run_dir = _run_dir(tmp_path, tiny_model, [3, 12], weights)
    resolved = resolve_eval_model(run_dir)
    latest = run_dir / "checkpoints" / "update_000012"
    assert resolved == ResolvedModel(latest / "hf", str(latest), 12)
    assert resolve_eval_model(run_dir / "checkpoints" / "update_000003").policy_version == 3
    loaded = load_file(str(resolved.model_dir / "model.safetensors"))
    assert set(loaded) | {"lm_head.weight"} >= set(weights) and torch.equal(
        loaded["model.embed_tokens.weight"], weights["model.embed_tokens.weight"]
    )
    assert (resolved.model_dir / "config.json").read_text() == (
        tiny_model / "config.json").read_text()


def test_a_run_checkpoint_with_an_exported_hf_folder_uses_that_folder(tmp_path, tiny_model):
    run_dir = _run_dir(tmp_path, tiny_model, [5], {})
    exported = run_dir / "checkpoints" / "update_000005" / "hf"
    exported.mkdir()
    (exported / "config.json").write_text("{}")
    assert resolve_eval_model(run_dir).model_dir == exported


def test_run_dirs_without_checkpoints_or_with_foreign_weight_names_are_refused(
    tmp_path, tiny_model
):
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(EvalError, match="no complete checkpoint"):
        resolve_eval_model(empty)
    run_dir = _run_dir(tmp_path, tiny_model, [1], {"blocks.0.attn.qkv": torch.zeros(2)})
    with pytest.raises(EvalError, match="names the base model"):
        resolve_eval_model(run_dir)

