"""`PythonToolEnv` (`agent_rl/PythonTool-v0`): solve tasks with a sandboxed Python interpreter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from envs.sandbox_pool import acquire_session
from envs.spaces import Message
from envs.tasks import load_tasks
from envs.tool_calls import DEFAULT_MAX_CALL_CHARS
from envs.tool_env import ToolEnv, approximate_token_count
from envs.tools import ANSWER_TOOL_NAME, tool
from envs.verifiers import default_verifiers

__all__ = ["PYTHON_SYSTEM_PROMPT", "PythonToolEnv", "format_exec_result"]

logger = logging.getLogger(__name__)

PYTHON_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves tasks by writing and running Python code. Call the "
    "`python` tool to run code: variables persist between calls, and you see what it prints. "
    "Print the values you need. When you know the final answer, call the "
    f"`{ANSWER_TOOL_NAME}` tool with it."
)


def format_exec_result(result: Any) -> str:
    """An `ExecResult` as the text of a tool message: output, value, error and limit notes."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.value is not None:
        parts.append(result.value)
    if result.stderr:
        parts.append(f"[stderr]\n{result.stderr.rstrip()}")
    if result.error:
        parts.append(result.error.rstrip())
    if result.timed_out:
        parts.append(f"[the code ran past the time limit after {result.wall_s:.1f} s]")
    elif result.limit:
        parts.append(f"[the code hit the sandbox's {result.limit} limit]")
    if result.truncated:
        parts.append("[output truncated]")
    if result.restarted:
        parts.append("[the interpreter was restarted: earlier variables are gone]")
    return "\n".join(parts) if parts else "[no output; print() what you want to see]"


class PythonToolEnv(ToolEnv):
    """Solve arithmetic, string, date and coding tasks with a persistent Python interpreter.

    ## Description
    The model gets a task from the shipped task sets (`envs.tasks.load_tasks`) and two tools:
    `python`, which runs code in a sandboxed interpreter that keeps its state for the whole
    episode, and `answer`, which submits the final answer. Each episode holds one sandbox
    session from a pool shared by the process, taken at the first `python` call and handed
    back (reset) at the next `reset()` or `close()`.

    ## Action Space
    `AssistantText`: an assistant turn with `<tool_call>` blocks calling
    `python(code: str)` or `answer(answer: str)`, as listed in `info["tools"]`.

    ## Observation Space
    `MessagesSpace`: `[system, user]` on reset; then a tool message per call holding what the
    code printed, its last expression's value and any traceback, or a user message with
    feedback when the turn had no valid tool call.

    ## Rewards
    1 when the final answer is right, else 0: numeric match (exact for integers) for
    arithmetic and counts, normalized exact match for strings and dates, and the task's unit
    tests run in a fresh sandbox session for code tasks.

    ## Starting State
    A task from `options["task"]` (row, index or task id) or drawn with the seeded `np_random`.

    ## Episode End
    Termination when the model answers; truncation after `max_turns` turns or `max_tokens`
    tokens without an answer, or (with `end_on_timeout`, the default) right after a call that
    hung until the sandbox killed it at its time limit: `info["end_reason"]` is then
    `"sandbox_timeout"` and the reward 0. A hung interpreter has lost its state, and episodes
    that wait on it only burn rollout time.

    ## Arguments
    - `split`: "train" or "heldout" (never trained on).
    - `categories`: a subset of "arithmetic", "strings", "dates", "code"; default all.
    - `tasks`: a dataset or list of task dicts used instead of the shipped ones.
    - `sandbox_config`: a `sandbox.SandboxConfig`; default bubblewrap, 10 s, 512 MB per call.
    - `max_turns` (8), `max_tokens` (None), `count_tokens`, `max_call_chars`.
    - `end_on_timeout` (True): end the episode when a call hits the sandbox's time limit.
    - `plain_text_answers` (False): a turn without any tool call is the final answer (see
      `ToolEnv`); small models that never learned the call format then still earn reward.

    ## Examples
    >>> import gymnasium, envs
    >>> env = gymnasium.make("agent_rl/PythonTool-v0", split="heldout", categories=["arithmetic"])
    >>> messages, info = env.reset(seed=0)
    >>> call = '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
    >>> messages, reward, terminated, truncated, info = env.step(call)
    >>> messages[0]["content"]
    '42'
    """

    def __init__(
        self,
        split: str = "train",
        categories: Sequence[str] | None = None,
        tasks: Any = None,
        sandbox_config: Any = None,
        max_turns: int = 8,
        max_tokens: int | None = None,
        count_tokens: Callable[[str], int] = approximate_token_count,
        max_call_chars: int = DEFAULT_MAX_CALL_CHARS,
        render_mode: str | None = None,
        end_on_timeout: bool = True,
        plain_text_answers: bool = False,
    ):
        self.sandbox_config = sandbox_config
        self.end_on_timeout = end_on_timeout
        self._interpreter_deaths = 0
        self._session: Any = None
        self._pool: Any = None
        dataset = tasks if tasks is not None else load_tasks(split=split, categories=categories)
        super().__init__(
            dataset,
            tools=[tool(self.python)],
            reward_fn=default_verifiers(sandbox_config),
            system_prompt=PYTHON_SYSTEM_PROMPT,
            max_turns=max_turns,
            max_tokens=max_tokens,
            count_tokens=count_tokens,
            max_call_chars=max_call_chars,
            render_mode=render_mode,
            plain_text_answers=plain_text_answers,
        )

    def python(self, code: str) -> str:
        """Run Python code in a persistent interpreter and return what it printed.

        Variables, imports and files persist between calls in the same episode. The value of
        a final expression is shown too, like in a notebook.

        Args:
            code: Python source code to run.

        Returns:
            The printed output, the last expression's value and any error traceback.
        """
        result = self._episode_session().run(code)  # SandboxUnavailableError: the env broke
        self._interpreter_deaths += result.crashed
        if result.timed_out and self.end_on_timeout:
            self.stop_episode("sandbox_timeout")
        return format_exec_result(result)

    def _episode_session(self) -> Any:
        if self._session is None:
            self._session, self._pool = acquire_session(self.sandbox_config, purpose="episodes")
        return self._session

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """`ToolEnv.step`, with `info["interpreter_deaths"]`: this episode's calls so far whose
        interpreter died (not timed out). The model sees a restarted interpreter, so a score
        alone cannot tell its failures from the sandbox's; an evaluation counts these."""
        messages, reward, terminated, truncated, info = super().step(action)
        info["interpreter_deaths"] = self._interpreter_deaths
        return messages, reward, terminated, truncated, info

    def end_episode(self) -> None:
        """Hand the episode's sandbox session back to the pool, wiped for the next episode."""
        session, pool = self._session, self._pool
        self._session = None
        self._interpreter_deaths = 0
        if session is not None and pool is not None:
            pool.release(session)
        super().end_episode()
