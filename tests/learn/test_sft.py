"""Supervised fine-tuning: demonstrations carry the rollout's exact token ids, only the model's
tokens are trained on, the loss falls on the tiny model, and an RL run can start from the result
(`init_from`) while a checkpoint of another model is refused before anything starts."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from agent_rl.env_config import EnvConfig
from agent_rl.learn.config import LearnerConfig
from agent_rl.learn.demonstrations import (
    DemonstrationError,
    chat_file_demonstrations,
    check_has_model_tokens,
    oracle_demonstrations,
    play_demonstration,
)
from agent_rl.learn.hf_export import InitFromError, resolve_init_from
from agent_rl.learn.learner import Learner
from agent_rl.learn.sft import demonstration_sample, run_sft, sft_step
from agent_rl.learn.sft_config import SFTConfig
from envs.loading import make_env
from envs.policies import OraclePolicy
from envs.tasks import load_tasks


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def demos(tokenizer) -> list[dict]:
    result = oracle_demonstrations("agent_rl/PythonTool-v0", tokenizer,
                                   categories=["arithmetic", "dates"], per_category=2)
    assert not result.dropped
    return result.rows


def test_demonstrations_come_from_the_train_split_and_earn_their_reward(demos):
    train_ids = set(load_tasks("train", ["arithmetic", "dates"])["task_id"])
    assert {row["task_id"] for row in demos} <= train_ids
    assert all(row["reward"] == 1.0 for row in demos)


def test_incremental_ids_equal_the_whole_conversation_rendered_by_the_template(tokenizer):
    """The ids SFT trains on are what the chat template makes of the finished conversation."""
    env = make_env("agent_rl/PythonTool-v0", split="train", categories=["strings"])
    task = env.unwrapped.dataset[0]
    row = play_demonstration(env, OraclePolicy(task), tokenizer, task)
    messages, info = env.reset(options={"task": task})
    conversation = list(messages)
    policy = OraclePolicy(task)
    while True:
        text = policy(conversation)
        conversation.append({"role": "assistant", "content": text})
        reply, _, terminated, truncated, _ = env.step(text)
        if terminated or truncated:
            break
        conversation.extend(reply)
    whole = tokenizer.apply_chat_template(conversation, tools=info["tools"], tokenize=False)
    expected = tokenizer(whole, add_special_tokens=False)["input_ids"]
    # The template closes the last assistant turn with "<|im_end|>\n"; the episode ends at the
    # stop token the model samples.
    assert row["token_ids"] == expected[: len(row["token_ids"])]
    assert tokenizer.decode(expected[len(row["token_ids"]):]) == "\n"
    env.close()


def test_sft_ids_equal_the_rollout_ids_for_the_same_turns(tokenizer, demos):
    """The rollout actor's episode loop, handed the demonstration's turns as its samples,
    records the very ids and mask the demonstration holds."""
    from agent_rl.rollout.actor import RolloutActor
    from agent_rl.rollout.config import RolloutConfig
    from agent_rl.rollout.engine import EngineConfig
    from agent_rl.rollout.episode import SampledTurn

    row = demos[0]
    task = next(t for t in load_tasks("train", ["arithmetic", "dates"]).to_list()
                if t["task_id"] == row["task_id"])
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    mask = row["loss_mask"]
    turns, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            turns.append(row["token_ids"][start:i])
            start = None
    actor = RolloutActor(EngineConfig(model="unused"), RolloutConfig(group_size=1))
    actor._tokenizer = tokenizer

    async def replay(token_ids, max_tokens, seed, min_tokens, on_tokens=None, top_logprobs=0):
        ids = turns.pop(0)
        return SampledTurn(ids, [0.0] * len(ids), [0] * len(ids), "stop", stop)

    actor.sample = replay
    trajectory = asyncio.run(actor._run_episode(task, "g", None))
    assert trajectory.token_ids == row["token_ids"]
    assert trajectory.loss_mask == row["loss_mask"]
    assert trajectory.reward == 1.0
    assert trajectory.info["tool_calls_total"] == 1  # the python call; `answer` is not counted


def test_only_the_assistant_turns_are_model_tokens(tokenizer, demos):
    row = demos[0]
    trained = tokenizer.decode([t for t, m in zip(row["token_ids"], row["loss_mask"],
                                                  strict=True) if m])
    assert trained.count("<tool_call>") == 2 and trained.count("<|im_end|>") == 2
    assert "<|im_start|>" not in trained and "tool\n" not in trained
    assert row["loss_mask"][0] == 0


def test_the_loss_is_the_mean_negative_logprob_of_model_tokens_only(tiny_model, demos):
    learner = Learner(tiny_model, LearnerConfig(lr=1e-9, micro_batch_tokens=600))
    expected = []
    for row in demos:
        logprobs = learner.token_logprobs(row["token_ids"])
        mask = torch.tensor(row["loss_mask"][1:], dtype=torch.bool)
        expected.append(-logprobs[mask])
    metrics = sft_step(learner, demos)
    assert metrics["losses/sft_loss"] == pytest.approx(float(torch.cat(expected).mean()), rel=1e-5)
    assert metrics["charts/model_tokens"] == sum(sum(row["loss_mask"]) for row in demos)


def test_sft_loss_falls_on_the_tiny_model(tiny_model, demos):
    learner = Learner(tiny_model, LearnerConfig(lr=3e-3))
    losses = [sft_step(learner, demos)["losses/sft_loss"] for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0], losses
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses


def test_sft_run_writes_a_checkpoint_that_eval_and_init_from_load(tiny_model, tmp_path):
    config = SFTConfig(model=str(tiny_model), env=EnvConfig(kwargs={"categories": ["arithmetic"]}),
                       demos_per_category=3, batch_size=2, epochs=1,
                       learner=LearnerConfig(lr=1e-4), out_dir=tmp_path / "sft")
    summary = run_sft(config)
    assert summary.steps == 2 and summary.demonstrations == 3
    assert (tmp_path / "sft" / "demonstrations" / "dataset_info.json").exists()
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").open()]
    assert [r["step"] for r in records] == [1, 2]

    folder = resolve_init_from(tmp_path / "sft", tiny_model)
    assert folder == summary.model_dir
    from agent_rl.evaluate.runner import resolve_eval_model
    assert resolve_eval_model(str(tmp_path / "sft")).model_dir == folder
    from kernels.llama import MatchedLlama
    loaded = MatchedLlama.from_pretrained(folder, dtype=torch.float32)
    learner = Learner(folder)
    row = chat_file_demonstrations(_chat_file(tmp_path, [_conversation()]),
                                   AutoTokenizer.from_pretrained(folder)).rows[0]
    ids = torch.tensor(row["token_ids"])
    assert torch.equal(loaded.token_logprobs(ids, 1.0).detach(), learner.token_logprobs(ids))
    again = run_sft(config)  # a finished run is not trained twice
    assert again.steps == 2 and again.model_dir == folder

    from agent_rl.orchestrate.launch import resolve_run_model
    from agent_rl.train_config import TrainConfig
    train = TrainConfig(model=str(tiny_model), init_from=tmp_path / "sft")
    assert resolve_run_model(train) == folder


def test_init_from_of_another_architecture_or_tokenizer_is_refused(tiny_model, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    config = json.loads((other / "config.json").read_text())
    config["num_hidden_layers"] += 1
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(InitFromError, match="num_hidden_layers"):
        resolve_init_from(other, tiny_model)
    shutil.rmtree(other)
    shutil.copytree(tiny_model, other)
    (other / "tokenizer.json").write_text("{}")
    with pytest.raises(InitFromError, match="another tokenizer"):
        resolve_init_from(other, tiny_model)
    with pytest.raises(InitFromError, match="does not exist"):
        resolve_init_from(tmp_path / "missing", tiny_model)


def _conversation() -> dict:
    return {"messages": [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": '<tool_call>\n{"name": "answer", "arguments": '
                                         '{"answer": "42"}}\n</tool_call>'},
    ]}


def _chat_file(folder: Path, records: list, name: str = "chats.jsonl") -> Path:
    path = folder / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_bad_demonstrations_are_refused_by_file_and_line(tokenizer, tmp_path):
    good = _conversation()
    cases = {
        "not json": "is not valid JSON",
        json.dumps({"messages": [{"role": "user", "content": "hi"}]}): "at least one assistant",
        json.dumps({"messages": [*good["messages"], {"role": "user", "content": "and?"}]}):
            "ends with the assistant",
        json.dumps({"messages": [{"role": "robot", "content": "hi"}]}): "role",
    }
    for line, message in cases.items():
        path = _chat_file(tmp_path, [good, line])
        with pytest.raises(DemonstrationError, match=rf"chats.jsonl:2.*{message}"):
            chat_file_demonstrations(path, tokenizer)


def test_a_dataset_without_model_tokens_is_an_error(tokenizer, demos):
    import datasets

    empty = datasets.Dataset.from_list([{**demos[0], "loss_mask": [0] * len(demos[0]["loss_mask"])}])
    with pytest.raises(DemonstrationError, match="no model tokens"):
        check_has_model_tokens(empty)
    sample = demonstration_sample(demos[0])
    assert sample.model_positions.numel() == sum(demos[0]["loss_mask"])
