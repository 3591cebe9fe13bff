"""`ToolEnv`: a multi-turn tool-use environment built from a dataset, tools and a reward function.

Everything else (the system prompt, the tool-call format, the `answer` tool, budgets) has a
default, so a new environment is a few dozen lines; see `envs/examples/word_count_env.py`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium

from envs.errors import EnvsError
from envs.spaces import AssistantText, Message, MessagesSpace
from envs.tasks import normalize_task
from envs.tool_calls import (
    DEFAULT_MAX_CALL_CHARS,
    MalformedToolCall,
    ParsedTurn,
    format_tool_feedback,
    parse_tool_calls,
    render_tool_result,
    run_tool_call,
    tools_system_prompt,
)
from envs.tools import ANSWER_TOOL_NAME, Tool, answer, tool
from envs.verifiers import Verdict, Verifier, as_verdict, default_verifiers

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "EpisodeNotRunningError",
    "ToolEnv",
    "UnknownTaskError",
    "approximate_token_count",
]

logger = logging.getLogger(__name__)

MAX_TURN_CHARS = 1_000_000
"""Length bound of the action space; a longer turn is still parsed, its calls checked one by one."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves tasks step by step. Use the tools when they help. "
    f"When you know the final answer, call the `{ANSWER_TOOL_NAME}` tool with it."
)


class EpisodeNotRunningError(RuntimeError):
    """`step()` was called before `reset()` or after the episode ended."""


class UnknownTaskError(EnvsError, KeyError):
    """`options["task"]` named a task id or index the dataset does not have."""


def approximate_token_count(text: str) -> int:
    """About four characters per token: a tokenizer-free default for the token budget."""
    return (len(text) + 3) // 4


def _answer_parameter(answer_tool: Tool) -> str:
    """The argument that carries the final answer: the `answer` tool's first parameter, so a
    custom `answer(code: str)` works as well as the built-in `answer(answer: str)`."""
    names = list(answer_tool.parameters.get("properties", {}))
    if not names:
        raise ValueError(f"the `{ANSWER_TOOL_NAME}` tool must take the final answer as its first "
                         "parameter; it takes none")
    return names[0]


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output cut: {len(text) - limit:,} more characters]"


class ToolEnv(gymnasium.Env[list[Message], str]):
    """A multi-turn environment where the model calls tools and ends with a final answer.

    ## Description
    Each episode is one task from `dataset`. The model sees a system prompt listing the tools
    and the task, then writes assistant turns. Each turn may call tools in the Hermes/Qwen
    format `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the env runs them and
    answers with their results. The episode ends when the model calls the `answer` tool (or
    writes `<answer>...</answer>`), or when the turn or token budget runs out. With
    `plain_text_answers`, a turn that calls no tool at all is the final answer, as in the OpenAI
    and `verifiers` agent loops: a model too weak to write the answer format still gets graded.

    ## Action Space
    `AssistantText`: one assistant turn as a string. The tool schemas in `info["tools"]` (OpenAI
    function format) describe which calls are valid inside it.

    ## Observation Space
    `MessagesSpace`: a list of chat messages to append to the conversation. `reset` returns
    `[system, user]`; `step` returns one `{"role": "tool", "name": ..., "content": ...}` per
    call, or a single `{"role": "user", "content": feedback}` when the turn had no valid call
    (an empty list when the turn was only an `<answer>`).

    ## Rewards
    0 on every step except the one that gives the final answer, which gets the verifier's
    reward (1 for a correct answer with the shipped verifiers, 0 otherwise).

    ## Starting State
    A task chosen by `options["task"]` (a task row, an index or a task id) or drawn uniformly
    with the env's seeded `np_random`.

    ## Episode End
    - Termination: the model gave its final answer.
    - Truncation: `max_turns` assistant turns, or `max_tokens` tokens counted by
      `count_tokens` over the whole conversation, without a final answer; or a tool called
      `stop_episode(reason)`. `info["end_reason"]` says which.

    ## Arguments
    - `dataset`: a `datasets.Dataset` or a list of dicts with at least `prompt` and `answer`.
    - `tools`: typed, documented functions (or `Tool`s); the `answer` tool is added.
    - `reward_fn`: a verifier `(answer, task) -> Verdict | float | bool`, or a mapping from the
      task's `verifier` column to verifiers. Default: `exact`, `numeric`, `yes_no`, `unit_tests`.
    - `system_prompt`, `max_turns` (8), `max_tokens` (None), `count_tokens` (default about
      4 characters per token; pass a tokenizer's count for exact budgets),
      `max_call_chars` (64 Ki characters per call), `max_calls_per_turn` (16; later calls are
      skipped with an error message) and `max_result_chars` (20,000; longer tool results are
      cut with a note).
    - `plain_text_answers` (False): a turn with no tool call (and no malformed one) is the final
      answer instead of getting feedback that asks for a call.

    ## Examples
    >>> env = ToolEnv([{"prompt": "What is 2 + 3?", "answer": "5"}], tools=[])
    >>> messages, info = env.reset(seed=0)
    >>> env.step('<tool_call>{"name": "answer", "arguments": {"answer": "5"}}</tool_call>')[1]
    1.0

    Subclasses that hold per-episode resources release them in `end_episode()`.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        dataset: Any,
        tools: Sequence[Tool | Callable[..., Any]],
        reward_fn: Verifier | Mapping[str, Verifier] | None = None,
        *,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_turns: int = 8,
        max_tokens: int | None = None,
        count_tokens: Callable[[str], int] = approximate_token_count,
        max_call_chars: int = DEFAULT_MAX_CALL_CHARS,
        max_calls_per_turn: int = 16,
        max_result_chars: int = 20_000,
        render_mode: str | None = None,
        plain_text_answers: bool = False,
    ):
        if len(dataset) == 0:
            raise ValueError("the dataset is empty; a ToolEnv needs at least one task")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.dataset = dataset
        tool_objects = [item if isinstance(item, Tool) else tool(item) for item in tools]
        if all(item.name != ANSWER_TOOL_NAME for item in tool_objects):
            tool_objects.append(answer)
        self.tools: dict[str, Tool] = {item.name: item for item in tool_objects}
        self._answer_parameter = _answer_parameter(self.tools[ANSWER_TOOL_NAME])
        self.reward_fn = reward_fn if reward_fn is not None else default_verifiers()
        self.system_prompt = tools_system_prompt(self.tools.values(), system_prompt)
        self.tool_schemas = [item.schema for item in self.tools.values()]
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.count_tokens = count_tokens
        self.max_call_chars = max_call_chars
        self.max_calls_per_turn = max_calls_per_turn
        self.max_result_chars = max_result_chars
        self.render_mode = render_mode
        self.plain_text_answers = plain_text_answers
        self.action_space = AssistantText(max_length=MAX_TURN_CHARS)
        self.observation_space = MessagesSpace()
        self.task: dict[str, Any] | None = None
        self.turn = 0
        self.tokens_used = 0
        self.running = False
        self._stop_reason: str | None = None
        self._index_by_id: dict[str, int] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        self.end_episode()
        self.task = self._choose_task((options or {}).get("task"))
        self.turn = 0
        self._stop_reason = None
        self.running = True
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.task["prompt"]},
        ]
        self.tokens_used = sum(self.count_tokens(message["content"]) for message in messages)
        info = {
            "task_id": self.task["task_id"],
            "category": self.task["category"],
            "tools": copy.deepcopy(self.tool_schemas),
            "turn": 0,
        }
        return messages, info

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if not self.running or self.task is None:
            raise EpisodeNotRunningError(
                "step() needs a running episode: call reset() first (and again after "
                "terminated or truncated)"
            )
        self.turn += 1
        parsed = parse_tool_calls(action, self.tools, max_call_chars=self.max_call_chars)
        messages, calls_made, final_answer, tool_seconds = self._run_calls(parsed)
        if final_answer is None and self.plain_text_answers and not parsed.calls:
            messages, final_answer = [], action
        self.tokens_used += self.count_tokens(action if isinstance(action, str) else "")
        self.tokens_used += sum(self.count_tokens(message["content"]) for message in messages)

        verdict: Verdict | None = None
        end_reason: str | None = None
        if final_answer is not None:
            verdict = self._verify(final_answer)
            end_reason = "answer"
        elif self._stop_reason is not None:
            end_reason = self._stop_reason
        elif self.turn >= self.max_turns:
            end_reason = "max_turns"
        elif self.max_tokens is not None and self.tokens_used >= self.max_tokens:
            end_reason = "max_tokens"
        if end_reason is not None:
            logger.debug("episode on %s ended by %s after %d turns", self.task["task_id"],
                         end_reason, self.turn)
        terminated = end_reason == "answer"
        truncated = end_reason is not None and not terminated
        self.running = end_reason is None
        info = {
            "task_id": self.task["task_id"],
            "category": self.task["category"],
            "turn": self.turn,
            "tool_calls": calls_made,
            "errors": [error.reason for error in parsed.errors],
            "answer": final_answer,
            "verdict": verdict.to_dict() if verdict is not None else None,
            "end_reason": end_reason,
            "tokens_used": self.tokens_used,
            "tool_seconds": tool_seconds,
        }
        reward = verdict.reward if verdict is not None else 0.0
        return messages, reward, terminated, truncated, info

    def _run_calls(
        self, parsed: ParsedTurn
    ) -> tuple[list[Message], list[dict[str, Any]], str | None, float]:
        """Run the turn's calls in order up to the `answer` call; malformed ones get an error
        message in their place. A turn with no valid call gets one feedback message instead."""
        if not parsed.valid_calls:
            if parsed.answer is not None:
                return [], [], parsed.answer, 0.0
            return [{"role": "user", "content": format_tool_feedback(parsed.errors)}], [], None, 0.0
        messages: list[Message] = []
        calls_made: list[dict[str, Any]] = []
        final_answer, tool_seconds = parsed.answer, 0.0
        for call in parsed.calls[: self.max_calls_per_turn]:
            if isinstance(call, MalformedToolCall):
                name = call.name or "error"
                messages.append({"role": "tool", "name": name, "content": f"Error: {call.reason}"})
                continue
            calls_made.append(call.to_dict())
            result = run_tool_call(call, self.tools)
            tool_seconds += result.seconds
            content = _cut(result.content, self.max_result_chars)
            messages.append({"role": "tool", "name": call.name, "content": content})
            if call.name == ANSWER_TOOL_NAME:
                value = call.arguments.get(self._answer_parameter, "")
                final_answer = value if isinstance(value, str) else render_tool_result(value)
                break
        else:
            if len(parsed.calls) > self.max_calls_per_turn:
                messages.append({"role": "tool", "name": "error", "content": (
                    f"Error: only the first {self.max_calls_per_turn} tool calls of a turn run; "
                    f"{len(parsed.calls) - self.max_calls_per_turn} were skipped"
                )})
        return messages, calls_made, final_answer, tool_seconds

    def close(self) -> None:
        self.end_episode()
        super().close()

    def stop_episode(self, reason: str) -> None:
        """Let a tool end the episode after the current turn: truncated, reward 0, and
        `info["end_reason"] = reason`. For faults that make going on pointless, such as a
        sandbox that hung until it was killed."""
        self._stop_reason = reason

    def end_episode(self) -> None:
        """Release per-episode resources; called by `reset` and `close`. Subclasses extend it."""
        self.running = False

    def _verify(self, final_answer: str) -> Verdict:
        assert self.task is not None
        verifier = self.reward_fn
        if isinstance(verifier, Mapping):
            name = self.task["verifier"]
            if name not in verifier:
                raise KeyError(
                    f"task {self.task['task_id']!r} asks for verifier {name!r}, but this env has "
                    f"only {sorted(verifier)}; pass it in reward_fn"
                )
            verifier = verifier[name]
        return as_verdict(verifier(final_answer, self.task))

    def _choose_task(self, choice: Any) -> dict[str, Any]:
        if isinstance(choice, Mapping):
            return normalize_task(choice)
        if choice is None:
            index = int(self.np_random.integers(len(self.dataset)))
        elif isinstance(choice, int):
            if not 0 <= choice < len(self.dataset):
                raise UnknownTaskError(
                    f"task index {choice} is out of range; the dataset has {len(self.dataset)}"
                )
            index = choice
        elif isinstance(choice, str):
            index = self._index_of(choice)
        else:
            raise TypeError(
                f'options["task"] must be a task dict, an index or a task id, got {choice!r}'
            )
        return normalize_task(self.dataset[index], index)

    def _index_of(self, task_id: str) -> int:
        if self._index_by_id is None:
            ids = [normalize_task(row, i)["task_id"] for i, row in enumerate(self.dataset)]
            self._index_by_id = {task_id: index for index, task_id in enumerate(ids)}
        if task_id not in self._index_by_id:
            raise UnknownTaskError(f"no task with id {task_id!r} in this env's dataset")
        return self._index_by_id[task_id]
