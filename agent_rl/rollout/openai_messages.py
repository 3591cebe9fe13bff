"""OpenAI chat messages on one side, the env loop's messages on the other.

An agent speaks the OpenAI chat format: assistant turns carry `tool_calls` with JSON-string
arguments, tool results are `role: tool` messages naming a `tool_call_id`. The env loop renders
what a `ToolEnv` writes: the assistant's sampled text as it is (Hermes `<tool_call>` blocks
included), tool results as `{"role": "tool", "name": ..., "content": ...}`, and the tool schemas
in the system prompt. This module translates between the two and says when two OpenAI messages
mean the same turn; it holds no state and knows nothing of tokens.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs.tool_calls import (
    CALL_CLOSE,
    CALL_OPEN,
    ToolCall,
    format_tool_call,
    parse_tool_calls,
    schemas_system_prompt,
)

Message = dict[str, Any]

_CALL_BLOCK = re.compile(re.escape(CALL_OPEN) + r".*?" + re.escape(CALL_CLOSE), re.S)


class MessageFormatError(ValueError):
    """A request message this endpoint cannot read; `index` names it in the request."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"messages[{index}]: {reason}")
        self.index = index


@dataclass(frozen=True)
class TurnKey:
    """What identifies a message when a client sends its history back: role, text and calls
    (name and arguments as JSON values, so re-serialized arguments still match). Call ids and
    fields such as `refusal: null` that clients echo are not part of it."""

    role: str
    content: str
    calls: tuple[tuple[str, str], ...] = ()
    tool_call_id: str = ""


def content_text(content: Any, index: int) -> str:
    """A message's content as one string: None is empty, a list of text parts is joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise MessageFormatError(index, f"content part of type {kind!r}: only text "
                                                "parts are supported")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise MessageFormatError(index, f"content must be a string or a list of text parts, "
                                    f"got {type(content).__name__}")


def turn_key(message: Mapping[str, Any], index: int) -> TurnKey:
    """The comparison key of one request message (see `TurnKey`)."""
    role = message.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise MessageFormatError(index, f"unknown role {role!r}; expected system, user, "
                                        "assistant or tool")
    calls = tuple((name, json.dumps(arguments, sort_keys=True))
                  for name, arguments in _calls_of(message, index))
    return TurnKey(role=str(role), content=content_text(message.get("content"), index),
                   calls=calls, tool_call_id=str(message.get("tool_call_id") or ""))


def _calls_of(message: Mapping[str, Any], index: int) -> list[tuple[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise MessageFormatError(index, "a tool call needs function.name")
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as error:
            raise MessageFormatError(index, f"tool call {function['name']!r} has arguments "
                                            f"that are not JSON ({error})") from error
        calls.append((function["name"], parsed))
    return calls


def env_loop_message(message: Mapping[str, Any], index: int,
                     call_names: Mapping[str, str]) -> Message:
    """The message as a `ToolEnv` episode would hold it, for rendering.

    `call_names` maps the tool-call ids this episode returned to their tool names: the env loop's
    tool messages carry the tool's name, which an OpenAI tool message names only by call id.
    """
    key = turn_key(message, index)
    if key.role == "tool":
        name = call_names.get(key.tool_call_id) or message.get("name")
        if not name:
            raise MessageFormatError(index, f"tool message with tool_call_id "
                                            f"{key.tool_call_id!r}, which names no tool call "
                                            "this episode returned; send the id you were given")
        return {"role": "tool", "name": str(name), "content": key.content}
    if key.role == "assistant":
        blocks = [format_tool_call(name, arguments)
                  for name, arguments in _calls_of(message, index)]
        return {"role": "assistant", "content": "\n".join([key.content, *blocks]).strip()}
    role = "system" if key.role == "developer" else key.role
    return {"role": role, "content": key.content}


def opening_messages(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None,
                     call_names: Mapping[str, str] | None = None) -> list[Message]:
    """The first request's messages as the env loop's opening: with tools, the system prompt
    lists them as `ToolEnv` writes it (the client's system text as its preamble). `call_names`:
    see `env_loop_message` (a new segment's history answers calls this episode returned)."""
    opening = [env_loop_message(message, index, call_names or {})
               for index, message in enumerate(messages)]
    if not tools:
        return opening
    if opening and opening[0]["role"] == "system":
        opening[0] = {"role": "system",
                      "content": schemas_system_prompt(tools, opening[0]["content"])}
    else:
        opening.insert(0, {"role": "system", "content": schemas_system_prompt(tools)})
    return opening


def assistant_message(text: str) -> Message:
    """The OpenAI assistant message for a sampled turn's text.

    Well-formed Hermes calls become `tool_calls` and leave the rest as content; a turn with any
    malformed call keeps its whole text as content and has no `tool_calls`, so the agent sees
    what the model wrote (as a `ToolEnv` would, which answers such a turn with an error).
    """
    parsed = parse_tool_calls(text)
    calls = parsed.valid_calls
    if not calls or parsed.errors:
        return {"role": "assistant", "content": text}
    # Only trailing space goes: what was streamed before the first call stays a prefix.
    content = _CALL_BLOCK.sub("", text).rstrip()
    return {"role": "assistant", "content": content or None,
            "tool_calls": [_openai_call(call) for call in calls]}


def streamable_content(text: str) -> str:
    """The part of a turn's text so far that is sure to begin its final `content`: it stops
    before anything that may open a tool call, before an incomplete character, and before
    trailing space (which the final content drops when the turn has calls)."""
    end = text.find(CALL_OPEN)
    if end < 0:
        end = len(text)
        for length in range(min(len(CALL_OPEN) - 1, len(text)), 0, -1):
            if text.endswith(CALL_OPEN[:length]):
                end = len(text) - length
                break
    broken = text.find("\ufffd")
    if 0 <= broken < end:
        end = broken
    return text[:end].rstrip()


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call.name,
                         "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


def call_names(message: Mapping[str, Any]) -> dict[str, str]:
    """Tool-call id -> tool name, for the calls of an assistant message this endpoint returned."""
    return {call["id"]: call["function"]["name"] for call in message.get("tool_calls") or []}
