"""Tool schemas from typed functions, and strict, never-raising parsing of tool calls."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.tool_calls import (
    MalformedToolCall,
    ToolCall,
    format_tool_call,
    format_tool_feedback,
    parse_tool_calls,
    run_tool_call,
    tools_system_prompt,
)
from envs.tools import Tool, ToolDefinitionError, answer, tool


@tool
def scale(values: list[float], factor: int, mode: Literal["up", "down"] = "up") -> list[float]:
    """Scale a list of numbers.

    Args:
        values: The numbers to scale.
        factor: How much to scale them by,
            as a whole number.
        mode: Whether to multiply or divide.

    Returns:
        The scaled numbers.
    """
    return [v * factor if mode == "up" else v / factor for v in values]


@tool
def explode(reason: str) -> str:
    """Always fails, to test that tool errors reach the model.

    Args:
        reason: The message of the error.
    """
    raise RuntimeError(reason)


TOOLS: dict[str, Tool] = {item.name: item for item in (scale, explode, answer)}


def call(payload: object) -> str:
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


def test_tool_schema_comes_from_type_hints_and_docstring():
    assert scale.schema == {
        "type": "function",
        "function": {
            "name": "scale",
            "description": "Scale a list of numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "values": {"type": "array", "items": {"type": "number"},
                               "description": "The numbers to scale."},
                    "factor": {"type": "integer",
                               "description": "How much to scale them by, as a whole number."},
                    "mode": {"type": "string", "enum": ["up", "down"],
                             "description": "Whether to multiply or divide."},
                },
                "required": ["values", "factor"],
            },
        },
    }


def test_function_without_type_hint_cannot_become_a_tool():
    def untyped(x):
        """Does something."""

    with pytest.raises(ToolDefinitionError, match="'x' needs a type hint"):
        tool(untyped)


def test_function_without_docstring_cannot_become_a_tool():
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ToolDefinitionError, match="no docstring"):
        tool(undocumented)


def test_well_formed_call_parses_with_ints_widened_to_floats():
    parsed = parse_tool_calls(
        "Sure. " + call({"name": "scale", "arguments": {"values": [1, 2.5], "factor": 3}}), TOOLS
    )
    assert parsed.calls == [ToolCall("scale", {"values": [1.0, 2.5], "factor": 3})]
    assert parsed.answer is None


def test_several_calls_keep_their_order():
    text = call({"name": "explode", "arguments": {"reason": "a"}}) + "\n" + call(
        {"name": "answer", "arguments": {"answer": "7"}}
    )
    assert [c.name for c in parse_tool_calls(text, TOOLS).calls] == ["explode", "answer"]


MALFORMED = {
    "bad JSON": ("<tool_call>{'name': 'scale'}</tool_call>", "not valid JSON"),
    "not an object": ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
    "unknown tool": (call({"name": "scal", "arguments": {}}), "Did you mean 'scale'"),
    "wrong argument type": (
        call({"name": "scale", "arguments": {"values": [1], "factor": "3"}}),
        "'factor' must be of type integer, got string",
    ),
    "wrong item type": (
        call({"name": "scale", "arguments": {"values": ["x"], "factor": 3}}),
        "'values[0]' must be of type number",
    ),
    "bool is not an integer": (
        call({"name": "scale", "arguments": {"values": [], "factor": True}}),
        "must be of type integer, got boolean",
    ),
    "missing argument": (
        call({"name": "scale", "arguments": {"values": [1]}}), "missing required argument 'factor'"
    ),
    "unknown argument": (
        call({"name": "scale", "arguments": {"values": [], "factor": 1, "speed": 2}}),
        "no argument 'speed'",
    ),
    "enum value": (
        call({"name": "scale", "arguments": {"values": [], "factor": 1, "mode": "sideways"}}),
        "must be one of 'up', 'down'",
    ),
    "missing arguments key": (call({"name": "scale"}), 'needs an "arguments" object'),
    "extra key": (call({"name": "scale", "arguments": {}, "id": 1}), "unexpected key 'id'"),
    "duplicate key": (
        '<tool_call>{"name": "answer", "name": "scale", "arguments": {}}</tool_call>',
        "duplicate key",
    ),
    "NaN": ('<tool_call>{"name": "scale", "arguments": {"values": [NaN]}}</tool_call>', "NaN"),
    "cut off": ('<tool_call>{"name": "answer", "arguments": {"answer": "4"', "cut off"),
    "non-UTF-8 bytes": (b"<tool_call>\xff\xfe</tool_call>", "not valid UTF-8"),
    "lone surrogate": ("<tool_call>\udcff</tool_call>", "not valid UTF-8"),
    "1 MB argument": (
        call({"name": "answer", "arguments": {"answer": "x" * 1_000_000}}), "the limit is 65,536"
    ),
    "answer cut off": ("<answer>42", "no closing </answer>"),
}


@pytest.mark.parametrize("text, reason", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_call_becomes_feedback_not_an_exception(text, reason):
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.valid_calls == []
    assert len(parsed.errors) == 1
    assert reason in parsed.errors[0].reason
    assert len(parsed.errors[0].raw) <= 203
    assert reason in format_tool_feedback(parsed.errors)


def test_cut_off_call_does_not_swallow_the_next_call():
    text = '<tool_call>{"name": "answer"' + call({"name": "answer", "arguments": {"answer": "1"}})
    parsed = parse_tool_calls(text, TOOLS)
    assert isinstance(parsed.calls[0], MalformedToolCall)
    assert parsed.calls[1] == ToolCall("answer", {"answer": "1"})


def test_answer_tag_is_read_outside_tool_calls_only():
    parsed = parse_tool_calls(
        call({"name": "answer", "arguments": {"answer": "<answer>no</answer>"}})
        + " so <answer> 12 </answer>",
        TOOLS,
    )
    assert parsed.answer == "12"
    assert parsed.calls == [ToolCall("answer", {"answer": "<answer>no</answer>"})]


def test_text_without_calls_asks_for_a_tool_call():
    parsed = parse_tool_calls("I think the answer is 4.", TOOLS)
    assert parsed.calls == [] and parsed.answer is None
    assert "No tool call found" in format_tool_feedback(parsed.errors)


def test_tool_exception_becomes_an_error_message():
    result = run_tool_call(ToolCall("explode", {"reason": "disk on fire"}), TOOLS)
    assert result.content == "Error: RuntimeError: disk on fire"
    assert result.error == result.content


def test_system_prompt_lists_every_tool_schema():
    prompt = tools_system_prompt(TOOLS.values(), "Be brief.")
    assert prompt.startswith("Be brief.")
    for item in TOOLS.values():
        assert json.dumps(item.schema) in prompt


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parser_never_raises_on_any_text(text):
    parse_tool_calls(text, TOOLS)
    parse_tool_calls("<tool_call>" + text, TOOLS)
    parse_tool_calls("<tool_call>" + text + "</tool_call>", TOOLS)


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_formatted_call_parses_back_to_the_same_call(value):
    parsed = parse_tool_calls(format_tool_call("answer", {"answer": value}), TOOLS)
    assert parsed.calls == [ToolCall("answer", {"answer": value})]
