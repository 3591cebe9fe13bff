"""Demonstrations for supervised fine-tuning: whole episodes as token ids with loss masks.

Two sources. The env's oracle policy plays tasks of the train split (`oracle_demonstrations`):
an env that has its own oracle offers it as `env.oracle_policy(task)` (the desktop's scripted
oracle, `envs.desktop.oracle`), any other gets `envs.policies.OraclePolicy`; only episodes the
env rewards are kept, the others are counted with their task ids. A user's
JSONL file holds one chat conversation per line (`chat_file_demonstrations`). Both are rendered
by `EpisodeTokens`, the function the rollout builds its episodes with, so SFT trains on exactly
the tokens RL samples: the assistant's turns (with the stop token that ends them) are model
tokens (mask 1); the prompt, tool results and template markup are not (mask 0).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from agent_rl.errors import UserError
from agent_rl.rollout.chat_tokens import ChatTemplateError, ChatTokens, EpisodeTokens

__all__ = [
    "DATASET_DIR", "DemonstrationError", "Demonstrations", "chat_file_demonstrations",
    "check_has_model_tokens", "load_demonstrations", "oracle_demonstrations",
    "play_demonstration", "render_conversation", "save_demonstrations",
]

DATASET_DIR = "demonstrations"
ROLES = ("system", "user", "assistant", "tool")


class DemonstrationError(UserError, ValueError):
    """A demonstration that cannot be rendered or trained on, named with where it came from."""


@dataclass
class Demonstrations:
    """Rendered demonstrations and the count of those refused, by reason."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)

    def to_dataset(self) -> datasets.Dataset:
        if not self.rows:
            raise DemonstrationError(
                f"no demonstration was kept (refused: {dict(self.dropped) or 'none'})"
            )
        dataset = datasets.Dataset.from_list(self.rows)
        check_has_model_tokens(dataset)
        return dataset


def play_demonstration(
    env: Any, policy: Any, tokenizer: Any, task: Mapping[str, Any], pass_tools: bool = True
) -> dict[str, Any]:
    """One episode of `policy` on `task`, as the rollout would record it had it sampled the
    policy's turns."""
    messages, info = env.reset(options={"task": dict(task)})
    chat = ChatTokens(tokenizer, tools=info.get("tools") if pass_tools else None)
    tokens = EpisodeTokens(chat, messages)
    token_ids = list(tokens.opening_ids)
    loss_mask = [0] * len(token_ids)
    reward = 0.0
    while True:
        turn = chat.turn_ids(policy(tokens.history))
        token_ids += turn
        loss_mask += [1] * len(turn)
        text = tokens.add_assistant(turn, chat.stop_token_id)
        reply, step_reward, terminated, truncated, _ = env.step(text)
        reward += float(step_reward)
        if terminated or truncated:
            break
        reply_ids = tokens.add_env(reply)
        token_ids += reply_ids
        loss_mask += [0] * len(reply_ids)
    return {
        "task_id": str(info.get("task_id", task.get("task_id", ""))),
        "category": str(info.get("category", task.get("category", ""))),
        "source": "oracle",
        "token_ids": token_ids,
        "loss_mask": loss_mask,
        "reward": reward,
    }


def oracle_demonstrations(
    env_id: str,
    tokenizer: Any,
    env_kwargs: Mapping[str, Any] | None = None,
    categories: Sequence[str] | None = None,
    per_category: int | None = None,
    seed: int = 0,
) -> Demonstrations:
    """The oracle policy on the env's train split (never the held-out one): `per_category`
    tasks of each category (all when None), drawn with `seed`. The policy is the env's own
    `oracle_policy(task)` where it has one, else `OraclePolicy(task)`."""
    from envs.errors import EnvBrokenError
    from envs.loading import env_tasks, make_env
    from envs.policies import OraclePolicy

    kwargs = dict(env_kwargs or {})
    if categories:
        kwargs["categories"] = list(categories)
    tasks = _pick(env_tasks(env_id, "train", **kwargs), per_category, seed)
    result = Demonstrations()
    env = make_env(env_id, split="train", **kwargs)
    oracle_for = getattr(env.unwrapped, "oracle_policy", OraclePolicy)
    try:
        for task in tasks:
            try:
                row = play_demonstration(env, oracle_for(task), tokenizer, task)
            except EnvBrokenError as error:  # every other task would fail the same way
                raise DemonstrationError(
                    f"the env could not play the oracle's episode of {task.get('task_id')}: "
                    f"{error}") from error
            if row["reward"] > 0:
                result.rows.append(row)
            else:
                result.dropped[f"the env gave the oracle's answer 0 reward ({row['task_id']})"] += 1
    finally:
        env.close()
    return result


def chat_file_demonstrations(path: str | Path, tokenizer: Any) -> Demonstrations:
    """Demonstrations from a JSONL file: one `{"messages": [...], "tools": [...]}` per line.

    The messages before the first assistant message are the prompt; every assistant message
    is trained on; the messages between two assistant turns are what the environment said.
    Tool calls are written in the assistant's content, as the model writes them.

    Raises:
        DemonstrationError: a line that is not such a conversation, or that the chat template
            rejects, named by file and line number.
    """
    path = Path(path)
    if not path.exists():
        raise DemonstrationError(f"demonstration file {path} does not exist")
    result = Demonstrations()
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
                row = render_conversation(record.get("messages"), tokenizer, record.get("tools"))
            except json.JSONDecodeError as error:
                raise DemonstrationError(f"{where} is not valid JSON: {error}") from error
            except (ChatTemplateError, DemonstrationError) as error:
                raise DemonstrationError(f"{where}: {error}") from error
            except Exception as error:
                raise DemonstrationError(
                    f"{where}: the chat template rejects this conversation ({error})"
                ) from error
            row.update(task_id=str(record.get("task_id") or f"{path.stem}-{number}"),
                       category=str(record.get("category") or "demonstration"),
                       source=str(path))
            result.rows.append(row)
    return result


def render_conversation(
    messages: Any, tokenizer: Any, tools: Sequence[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Token ids and loss mask of a written conversation, as the rollout would build them."""
    if not isinstance(messages, list) or not messages:
        raise DemonstrationError("expected a non-empty list under `messages`")
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise DemonstrationError(f"each message needs a role among {ROLES}: {message!r}")
        if not isinstance(message.get("content"), str):
            raise DemonstrationError(f"message content must be a string: {message!r}")
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if not turns or turns[0] == 0:
        raise DemonstrationError("a demonstration needs a prompt, then at least one assistant turn")
    if messages[-1]["role"] != "assistant":
        raise DemonstrationError("a demonstration ends with the assistant's turn")
    chat = ChatTokens(tokenizer, tools=tools)
    tokens = EpisodeTokens(chat, messages[: turns[0]])
    token_ids = list(tokens.opening_ids)
    loss_mask = [0] * len(token_ids)
    for index, start in enumerate(turns):
        turn = chat.turn_ids(messages[start]["content"])
        token_ids += turn
        loss_mask += [1] * len(turn)
        tokens.add_assistant(turn, chat.stop_token_id)
        end = turns[index + 1] if index + 1 < len(turns) else len(messages)
        if start + 1 < end:
            reply_ids = tokens.add_env(messages[start + 1 : end])
            token_ids += reply_ids
            loss_mask += [0] * len(reply_ids)
    return {"token_ids": token_ids, "loss_mask": loss_mask, "reward": 1.0}


def check_has_model_tokens(dataset: datasets.Dataset) -> None:
    """Refuse a dataset that would train on nothing."""
    if not sum(sum(mask) for mask in dataset["loss_mask"]):
        raise DemonstrationError(
            "the demonstrations hold no model tokens (every loss_mask is 0): there is nothing "
            "to train on; each needs at least one assistant turn"
        )


def save_demonstrations(dataset: datasets.Dataset, run_dir: Path) -> Path:
    path = Path(run_dir) / DATASET_DIR
    dataset.save_to_disk(str(path))
    return path


def load_demonstrations(path: Path) -> datasets.Dataset:
    dataset = datasets.load_from_disk(str(path))
    check_has_model_tokens(dataset)
    return dataset


def _pick(tasks: list[dict[str, Any]], per_category: int | None, seed: int
          ) -> list[dict[str, Any]]:
    if per_category is None:
        return tasks
    by_category: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        by_category.setdefault(str(task.get("category", "")), []).append(task)
    rng = random.Random(seed)
    picked = []
    for category in sorted(by_category):
        rows = by_category[category]
        picked += rng.sample(rows, min(per_category, len(rows)))
    return picked

