"""Hermes/Qwen-style tool calls: strict parsing, prompt rendering and running.

The model writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks and may end
with `<answer>...</answer>`. Everything a model can get wrong (bad JSON, an unknown tool, wrong
argument types, a block cut off before its closing tag, non-UTF-8 bytes, a huge argument) turns
into a `MalformedToolCall` whose `reason` is written for the model to read and fix. Parsing never
raises on model output: one bad turn must not end a training run.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.errors import EnvBrokenError
from envs.tools import ANSWER_TOOL_NAME, Tool, ToolArgumentError

__all__ = [
    "DEFAULT_MAX_CALL_CHARS",
    "MalformedToolCall",
    "ParsedTurn",
    "ToolCall",
    "ToolResult",
    "format_tool_call",
    "format_tool_feedback",
    "parse_tool_calls",
    "render_tool_result",
    "run_tool_call",
    "schemas_system_prompt",
    "tools_system_prompt",
]

logger = logging.getLogger(__name__)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
DEFAULT_MAX_CALL_CHARS = 65_536
_PREVIEW_CHARS = 200


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call to a known tool with validated arguments."""

    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class MalformedToolCall:
    """A call the model got wrong. `reason` says what and how to fix it, for the model."""

    reason: str
    raw: str
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "error": self.reason, "raw": self.raw}


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn, split into its calls (in order) and its `<answer>` text, if any."""

    calls: list[ToolCall | MalformedToolCall] = field(default_factory=list)
    answer: str | None = None

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [call for call in self.calls if isinstance(call, ToolCall)]

    @property
    def errors(self) -> list[MalformedToolCall]:
        return [call for call in self.calls if isinstance(call, MalformedToolCall)]


@dataclass(frozen=True)
class ToolResult:
    """What one call returned, as the tool message content, and how long the tool ran."""

    name: str
    content: str
    error: str | None
    seconds: float


def parse_tool_calls(
    text: str | bytes,
    tools: Mapping[str, Tool] | None = None,
    *,
    max_call_chars: int = DEFAULT_MAX_CALL_CHARS,
) -> ParsedTurn:
    """Parse an assistant turn. With `tools`, names and arguments are checked against them.

    Never raises on malformed model output; see the module docstring.
    """
    decoded = _decode(text)
    if isinstance(decoded, MalformedToolCall):
        return ParsedTurn(calls=[decoded])
    calls: list[ToolCall | MalformedToolCall] = []
    outside: list[str] = []
    position = 0
    while True:
        start = decoded.find(CALL_OPEN, position)
        if start < 0:
            outside.append(decoded[position:])
            break
        outside.append(decoded[position:start])
        body_start = start + len(CALL_OPEN)
        end = decoded.find(CALL_CLOSE, body_start)
        next_open = decoded.find(CALL_OPEN, body_start)
        if end < 0 or 0 <= next_open < end:
            stop = len(decoded) if next_open < 0 else next_open
            calls.append(
                MalformedToolCall(
                    reason=f"the tool call was cut off: no closing {CALL_CLOSE} tag. Write the "
                    f"whole call as {CALL_OPEN}{{\"name\": ..., \"arguments\": {{...}}}}"
                    f"{CALL_CLOSE}",
                    raw=_preview(decoded[start:stop]),
                )
            )
            position = stop
            continue
        calls.append(_parse_call_body(decoded[body_start:end], tools, max_call_chars))
        position = end + len(CALL_CLOSE)
    answer = _find_answer("".join(outside))
    if isinstance(answer, MalformedToolCall):
        calls.append(answer)
        answer = None
    return ParsedTurn(calls=calls, answer=answer)


def _decode(text: str | bytes) -> str | MalformedToolCall:
    """Return the text as a valid UTF-8 string, or the reason it is not one."""
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as error:
            return MalformedToolCall(
                reason=f"your message is not valid UTF-8 (bad byte at position {error.start}); "
                "write plain text",
                raw=_preview(text.decode("utf-8", errors="replace")),
            )
    if not isinstance(text, str):
        return MalformedToolCall(
            reason=f"expected the assistant message as text, got {type(text).__name__}",
            raw=_preview(repr(text)),
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return MalformedToolCall(
            reason=f"your message is not valid UTF-8 (lone surrogate at position {error.start}); "
            "write plain text",
            raw=_preview(text.encode("utf-8", errors="replace").decode("utf-8")),
        )
    return text


def _parse_call_body(
    body: str, tools: Mapping[str, Tool] | None, max_call_chars: int
) -> ToolCall | MalformedToolCall:
    raw = _preview(body.strip())
    if len(body) > max_call_chars:
        return MalformedToolCall(
            reason=f"the tool call is {len(body):,} characters long; the limit is "
            f"{max_call_chars:,}. Send less data per call",
            raw=raw,
        )
    try:
        payload = json.loads(
            body, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except (json.JSONDecodeError, ValueError) as error:
        return MalformedToolCall(
            reason=f"the tool call is not valid JSON ({error}). Write "
            '{"name": "<tool name>", "arguments": {...}} with double-quoted keys and strings',
            raw=raw,
        )
    if not isinstance(payload, dict):
        return MalformedToolCall(
            reason='the tool call must be a JSON object {"name": ..., "arguments": {...}}',
            raw=raw,
        )
    name = payload.get("name")
    if not isinstance(name, str):
        return MalformedToolCall(reason='the tool call needs a "name" string', raw=raw)
    extra_keys = sorted(set(payload) - {"name", "arguments"})
    if extra_keys:
        return MalformedToolCall(
            reason=f'unexpected key {extra_keys[0]!r}: a tool call has only "name" and '
            '"arguments"',
            raw=raw,
            name=name,
        )
    if "arguments" not in payload:
        return MalformedToolCall(
            reason='the tool call needs an "arguments" object (use {} for no arguments)',
            raw=raw,
            name=name,
        )
    arguments = payload["arguments"]
    if tools is None:
        if not isinstance(arguments, dict):
            return MalformedToolCall(
                reason='"arguments" must be a JSON object', raw=raw, name=name
            )
        return ToolCall(name=name, arguments=arguments)
    if name not in tools:
        return MalformedToolCall(reason=_unknown_tool_reason(name, tools), raw=raw, name=name)
    try:
        arguments = tools[name].validate(arguments)
    except ToolArgumentError as error:
        return MalformedToolCall(reason=str(error), raw=raw, name=name)
    return ToolCall(name=name, arguments=arguments)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not valid JSON")


def _unknown_tool_reason(name: str, tools: Mapping[str, Tool]) -> str:
    close = difflib.get_close_matches(name, list(tools), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"there is no tool named {name!r}; the tools are: {', '.join(tools)}.{hint}"


def _find_answer(text: str) -> str | MalformedToolCall | None:
    start = text.find(ANSWER_OPEN)
    if start < 0:
        return None
    end = text.find(ANSWER_CLOSE, start)
    if end < 0:
        return MalformedToolCall(
            reason=f"the answer was cut off: no closing {ANSWER_CLOSE} tag",
            raw=_preview(text[start:]),
            name=ANSWER_TOOL_NAME,
        )
    return text[start + len(ANSWER_OPEN) : end].strip()


def _preview(text: str) -> str:
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "..."


def run_tool_call(call: ToolCall, tools: Mapping[str, Tool]) -> ToolResult:
    """Run a validated call. A tool's exception becomes an error message for the model, except
    `EnvBrokenError`: the env failed, and the step raises it."""
    started = time.perf_counter()
    try:
        value = tools[call.name](**call.arguments)
    except EnvBrokenError:
        raise
    except Exception as error:  # noqa: BLE001 - any tool failure is feedback, not a crash
        logger.debug("tool %s raised %r", call.name, error)
        content = f"Error: {type(error).__name__}: {error}"
        return ToolResult(call.name, content, content, time.perf_counter() - started)
    return ToolResult(call.name, render_tool_result(value), None, time.perf_counter() - started)


def render_tool_result(value: Any) -> str:
    """Tool return values as message text: strings as is, anything else as JSON if it can be."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The text a model should write to call `name`; used by scripted policies and prompts."""
    payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
    # "<\/" is JSON for "</": an argument holding "</tool_call>" cannot end the block early.
    payload = payload.replace("</", "<\\/")
    return f"{CALL_OPEN}\n{payload}\n{CALL_CLOSE}"


def format_tool_feedback(errors: Sequence[MalformedToolCall]) -> str:
    """A user message telling the model why its turn had no usable tool call."""
    if not errors:
        return (
            f"No tool call found. Call a tool with {CALL_OPEN}{{\"name\": ..., \"arguments\": "
            f"{{...}}}}{CALL_CLOSE}, or give your final answer with the "
            f"{ANSWER_TOOL_NAME!r} tool."
        )
    lines = [f"Error: {error.reason}" for error in errors]
    return "\n".join(lines)


def tools_system_prompt(tools: Iterable[Tool], preamble: str = "") -> str:
    """The system prompt section that lists the tools, in the Hermes/Qwen2.5 layout."""
    return schemas_system_prompt([tool.schema for tool in tools], preamble)


def schemas_system_prompt(schemas: Iterable[Mapping[str, Any]], preamble: str = "") -> str:
    """`tools_system_prompt` from OpenAI function schemas, for callers that have the schemas but
    not the functions (an OpenAI-compatible endpoint gets only `tools=` from its client)."""
    listed = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    parts = [preamble.strip()] if preamble.strip() else []
    parts.append(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{CALL_OPEN}{CALL_CLOSE} XML tags:\n{CALL_OPEN}\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        f"{CALL_CLOSE}"
    )
    return "\n\n".join(parts)
