"""Typed Python functions as LLM tools: the `@tool` decorator and its JSON schema.

A tool is a plain function with type hints and a Google-style docstring. The decorator reads
both and derives the OpenAI function schema that goes into the prompt, so the schema can never
drift from the code. The same type hints validate the model's arguments before the call.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ANSWER_TOOL_NAME",
    "Tool",
    "ToolArgumentError",
    "ToolDefinitionError",
    "answer",
    "json_type_of",
    "parse_docstring",
    "tool",
]

ANSWER_TOOL_NAME = "answer"

_SECTION_HEADERS = ("Args:", "Arguments:", "Returns:", "Raises:", "Examples:", "Example:", "Note:")


class ToolDefinitionError(TypeError):
    """A function cannot become a tool (missing type hint, unsupported type, no docstring)."""


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's signature; the message is shown to the model."""


@dataclass(frozen=True)
class Tool:
    """A callable tool: the function plus the schema the model sees.

    Attributes:
        name: The name the model calls it by.
        description: The docstring summary, shown to the model.
        parameters: JSON schema (type "object") of the arguments.
        function: The Python function that runs the call.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] = field(compare=False, repr=False)

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema, as chat templates take it in `tools=`."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check `arguments` against the schema and return them with ints widened to floats.

        Raises:
            ToolArgumentError: naming the argument, the value seen and what was expected.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentError(
                f'"arguments" must be a JSON object, got {_json_type_name(arguments)}'
            )
        properties: dict[str, Any] = self.parameters["properties"]
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolArgumentError(
                f"tool {self.name!r} has no argument {unknown[0]!r}; "
                f"its arguments are: {', '.join(properties) or '(none)'}"
            )
        missing = [name for name in self.parameters.get("required", []) if name not in arguments]
        if missing:
            raise ToolArgumentError(
                f"tool {self.name!r} is missing required argument {missing[0]!r}"
            )
        return {
            name: _check_value(value, properties[name], path=name)
            for name, value in arguments.items()
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


def tool(
    function: Callable[..., Any] | None = None, *, name: str | None = None
) -> Any:
    """Turn a typed, documented function into a `Tool`.

    Usable bare (`@tool`), with a name (`@tool(name="python")`) or as a call on a bound method
    (`tool(self.run_python)`), which is how a tool gets at per-episode state.

    Raises:
        ToolDefinitionError: a parameter lacks a type hint or uses an unsupported type, or the
            function has no docstring.
    """
    if function is None:
        return lambda inner: tool(inner, name=name)
    return _build_tool(function, name or function.__name__)


def _build_tool(function: Callable[..., Any], name: str) -> Tool:
    doc = inspect.getdoc(function)
    if not doc:
        raise ToolDefinitionError(
            f"tool {name!r} has no docstring; the model needs a description of what it does"
        )
    description, arg_docs = parse_docstring(doc)
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name!r}: *args/**kwargs cannot be described to a model")
        if parameter.name not in hints:
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {parameter.name!r} needs a type hint"
            )
        schema = json_type_of(hints[parameter.name], where=f"{name}.{parameter.name}")
        if parameter.name in arg_docs:
            schema["description"] = arg_docs[parameter.name]
        properties[parameter.name] = schema
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(name=name, description=description, parameters=parameters, function=function)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument texts."""
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    arg_docs: dict[str, str] = {}
    section = "description"
    current: str | None = None
    args_indent = _args_indent(lines)
    for line in lines:
        stripped = line.strip()
        if stripped in _SECTION_HEADERS:
            section = "args" if stripped in ("Args:", "Arguments:") else "other"
            current = None
            continue
        if section == "description":
            description.append(stripped)
        elif section == "args" and stripped:
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and _indent(line) <= args_indent:
                current = match.group(1)
                arg_docs[current] = match.group(3)
            elif current is not None:
                arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    text = " ".join(part for part in description if part).strip()
    return text, arg_docs


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _args_indent(lines: list[str]) -> int:
    """Indent of the first argument line: deeper lines continue an argument's text."""
    in_args = False
    for line in lines:
        if line.strip() in ("Args:", "Arguments:"):
            in_args = True
        elif in_args and line.strip():
            return _indent(line)
    return 0


def json_type_of(annotation: Any, where: str = "") -> dict[str, Any]:
    """The JSON schema of a Python type hint (str, int, float, bool, list, dict, Literal, |None)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return {"type": "number"}
    if annotation is list or origin is list:
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = json_type_of(args[0], where)
        return schema
    if annotation is dict or origin is dict:
        return {"type": "object"}
    if origin is Literal:
        return {"type": _json_type_name(args[0]), "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        non_null = [arg for arg in args if arg is not type(None)]
        if len(non_null) == 1 and len(args) == 2:
            schema = json_type_of(non_null[0], where)
            schema["nullable"] = True
            return schema
    raise ToolDefinitionError(
        f"{where or 'tool'}: type {annotation!r} has no JSON schema here; use str, int, float, "
        "bool, list[...], dict, Literal[...] or X | None"
    )


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _check_value(value: Any, schema: Mapping[str, Any], path: str) -> Any:
    """Validate one JSON value; ints are accepted (and widened) where numbers are expected."""
    if value is None and schema.get("nullable"):
        return None
    expected = schema["type"]
    seen = _json_type_name(value)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        raise ToolArgumentError(f"argument {path!r} must be one of {choices}, got {value!r}")
    if expected == "number" and seen in ("integer", "number"):
        return float(value)
    if expected != seen:
        raise ToolArgumentError(
            f"argument {path!r} must be of type {expected}, got {seen} {_preview(value)}"
        )
    if expected == "array" and "items" in schema:
        return [
            _check_value(item, schema["items"], f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    return value


def _preview(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@tool
def answer(answer: str) -> str:
    """Submit your final answer. This ends the episode; call it once, when you are sure.

    Args:
        answer: The final answer alone, e.g. "42", or the full code for code tasks.

    Returns:
        A confirmation that the answer was recorded.
    """
    return "Answer recorded."
