"""Loading YAML run configs into typed, validated pydantic models.

Configs are data: every knob lives in a pydantic model with a default, a type and a description.
This module only turns a file into such a model and turns validation failures into one sentence a
person can act on (the bad key, the nearest valid one, the value seen and what was expected).

A config may extend another: `base: demo.yaml` (a path relative to the config's own folder) reads
that file first and lays this one's keys over it, mappings merged key by key and any other value
replaced (`deep_merge`). A base may have a base of its own; a cycle or a missing file is an error
naming the files.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from agent_rl.errors import UserError

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(UserError, ValueError):
    """A config file or value that cannot be used, with a message that says how to fix it."""


class StrictModel(BaseModel):
    """Base for config sections: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# The key by which a config names the config it extends.
BASE_KEY = "base"


def load_config(path: str | Path, model: type[ModelT], overrides: dict[str, Any] | None = None) -> ModelT:
    """Read a YAML file (and the `base:` chain it extends) into `model`, applying dotted
    `overrides` ({"learner.lr": 1e-5}) on top."""
    path = Path(path)
    data, bases = read_config_data(path)
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    source = f"{path} (base: {' <- '.join(str(base) for base in bases)})" if bases else str(path)
    return validate_config(data, model, source=source, overridden=set(overrides or {}))


def read_config_data(path: str | Path) -> tuple[dict[str, Any], list[Path]]:
    """The mapping a YAML config file holds with its `base:` chain merged in, and the base files
    read, nearest first."""
    chain = [Path(path)]
    data = _read_mapping(chain[0])
    layers = [data]
    while BASE_KEY in data:
        base = data.pop(BASE_KEY)
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(
                f"{chain[-1]}: base = {base!r} is invalid: it must name another config file, "
                "relative to this one's folder (e.g. base: demo.yaml)"
            )
        base_path = chain[-1].parent / base
        if not base_path.exists():
            raise ConfigError(
                f"{chain[-1]}: base: {base} does not exist (looked for {base_path}); the path "
                "is relative to the folder of the config that names it"
            )
        if any(base_path.resolve() == seen.resolve() for seen in chain):
            cycle = " -> ".join(str(step) for step in [*chain, base_path])
            raise ConfigError(f"{chain[0]}: its base: chain runs in a cycle: {cycle}")
        chain.append(base_path)
        data = _read_mapping(base_path)
        layers.append(data)
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = deep_merge(merged, layer)
    return merged, chain[1:]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` laid over `base`: where both hold a mapping under a key they merge key by key;
    any other value of `override` replaces the base's. Neither argument is changed."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_mapping(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        with path.open() as stream:  # a named stream: YAML errors point at the file, line, column
            data = yaml.safe_load(stream) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of keys to values, got {type(data).__name__}")
    return data


def validate_config(data: dict[str, Any], model: type[ModelT], source: str = "config",
                    overridden: set[str] | frozenset[str] = frozenset()) -> ModelT:
    """Build `model` from a dict, rewriting the first validation error for people; an error in
    an `overridden` key is blamed on `--set`, not on the file."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_explain(err, model, source, overridden)) from None


def with_overrides(config: ModelT, overrides: dict[str, Any]) -> ModelT:
    """A copy of `config` with dotted `overrides` ({"pipeline.max_lag": 0}) applied and the
    whole tree validated again, as if they had been in the file."""
    data = config.model_dump(exclude_unset=True)
    for dotted, value in overrides.items():
        _set_dotted(data, dotted, value)
    return validate_config(data, type(config), source="overrides", overridden=set(overrides))


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[leaf] = value


def _explain(err: ValidationError, model: type[BaseModel], source: str,
             overridden: set[str] | frozenset[str] = frozenset()) -> str:
    first = err.errors()[0]
    location = [str(part) for part in first["loc"]]
    key = ".".join(location)
    if key in overridden:
        source = f"--set {key}"
    if first["type"] == "value_error":  # a validator's own sentence, about the section at `key`
        message = first["msg"].removeprefix("Value error, ")
        return f"{source}: {key}: {message}" if key else f"{source}: {message}"
    if first["type"] == "extra_forbidden":
        valid = _fields_at(model, location[:-1])
        below = _section_fields(model, location[:-1])
        nearest = difflib.get_close_matches(location[-1], valid, n=1) or [
            below[key] for key in difflib.get_close_matches(location[-1], below, n=1, cutoff=0.8)]
        hint = f"did you mean {nearest[0]!r}? " if nearest else ""
        return f"{source}: unknown key {key!r}; {hint}valid keys here: {', '.join(sorted(valid))}"
    return f"{source}: {key} = {first.get('input')!r} is invalid: {first['msg']}"


def _fields_at(model: type[BaseModel], location: list[str]) -> list[str]:
    current: Any = model
    for part in location:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def _section_fields(model: type[BaseModel], location: list[str]) -> dict[str, str]:
    """The keys one section below `location`, each with its dotted place ("num_updates" ->
    "pipeline.num_updates"): where a key of the right name but the wrong level belongs."""
    return {key: f"{section}.{key}" for section in _fields_at(model, location)
            for key in _fields_at(model, [*location, section])}


def parse_key_values(items: list[str] | tuple[str, ...], option: str) -> dict[str, Any]:
    """Command-line `KEY=VALUE` items as a dict; values are YAML (`true`, `3`, `[a, b]`)."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r} is not KEY=VALUE")
        try:
            parsed[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ConfigError(f"{option} {item!r}: the value is not YAML ({error})") from error
    return parsed


def dump_config(config: BaseModel, path: str | Path) -> None:
    """Write the fully resolved config next to a run's outputs."""
    Path(path).write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
