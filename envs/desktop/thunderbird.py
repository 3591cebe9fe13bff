"""OSWorld's Thunderbird metrics, read from the profile files the `vm_file` getter copies out.

- `check_thunderbird_prefs`: `prefs.js` holds `user_pref("key", value);` lines (value as
  JSON). Every key of `rules["expect"]` must be set and pass its value rule (`value_rules`;
  a key set twice counts its last line), and no key of `rules["unexpect"]` may be set to a
  value passing its rule. A key absent from the file fails `expect` and passes `unexpect`.
- `check_thunderbird_filter`: a `msgFilterRules.dat` is a list of filters, each from its
  `name="..."` line to its `condition="..."` line, with `enabled`, `type`, `action`,
  `actionValue` between; its condition is split into terms (`AND (subject,contains,x)`,
  `ALL`). Every record of `rules["expect"]` must match some filter and no record of
  `rules["unexpect"]` any (a record matches when each of its keys has the same value).
"""

from __future__ import annotations

import json
import re
from typing import Any

from envs.desktop.file_metrics import matches_record
from envs.desktop.value_rules import matches_rule

__all__ = ["check_thunderbird_filter", "check_thunderbird_prefs", "read_filters", "read_prefs"]

_PREF = re.compile(r'^user_pref\("(?P<key>(?:[^"]|\\")+)", (?P<value>.+)\);$')
# One term of a filter's condition, as OSWorld splits it: `AND (field,relation,value)` (the
# value quoted when it holds a parenthesis), `OR (...)`, or `ALL`.
_CONDITION_TERM = re.compile(
    r"\b(?:AND|OR) \((?:[\w ]+),(?:[\w ']+),(?:\"(?:(?:[^\"]|\")+)\"|(?:[^)]+))\)|\bALL\b")
_FILTER_FIELDS = ("name", "enabled", "type", "action", "actionValue", "condition")


def read_prefs(path: str) -> list[tuple[str, Any]]:
    """`(key, value)` of each `user_pref` line of a prefs.js, in file order."""
    prefs = []
    with open(path) as file:
        for line in file:
            if match := _PREF.match(line.strip()):
                prefs.append((match["key"], json.loads(match["value"])))
    return prefs


def check_thunderbird_prefs(result: str | None, rules: dict[str, dict[str, Any]]) -> float:
    """1 if every `expect` preference is set and passes its rule and no `unexpect` one is
    set to a value that passes its rule."""
    if result is None:
        return 0.0
    expect, unexpect = rules.get("expect", {}), rules.get("unexpect", {})
    expect_passes = dict.fromkeys(expect, False)
    unexpected = False
    for key, value in read_prefs(result):
        if key in expect:
            expect_passes[key] = matches_rule(value, expect[key])
        elif key in unexpect:
            unexpected = unexpected or matches_rule(value, unexpect[key])
    return float(all(expect_passes.values()) and not unexpected)


def _unquote(raw: str) -> str:
    value = raw.rstrip("\r\n")
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value.replace('\\"', '"').replace("\\\\", "\\")


def read_filters(path: str) -> list[dict[str, Any]]:
    """The filters of a msgFilterRules.dat, each a dict of its fields, `condition` as the list
    of its terms."""
    filters: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with open(path) as file:
        for line in file:
            field, separator, raw = line.partition("=")
            if not separator or field not in _FILTER_FIELDS:
                continue
            if field == "name":
                current = {}
            value = _unquote(raw)
            if field == "condition":
                current["condition"] = _CONDITION_TERM.findall(value)
                filters.append(current)
            else:
                current[field] = value
    return filters


def check_thunderbird_filter(result: str | None, rules: dict[str, list[dict[str, Any]]]) -> float:
    """1 if every `expect` record matches a filter and no `unexpect` record matches one."""
    if result is None:
        return 0.0
    filters = read_filters(result)
    expected = all(any(matches_record(pattern, found) for found in filters)
                   for pattern in rules.get("expect", []))
    unexpected = any(matches_record(pattern, found) for found in filters
                     for pattern in rules.get("unexpect", []))
    return float(expected and not unexpected)
