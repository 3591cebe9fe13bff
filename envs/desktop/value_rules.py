"""OSWorld's value rules: `{"method": ..., "ref": ...}`, a test of one value against a reference.

Spreadsheet checks (`compare_table`'s `check_cell`, `zoom` and `data_validation` rules) state
what a cell, a zoom level or a validation must be this way. The methods, as OSWorld's
`_match_value_to_rule` reads them:

- `eq`, `ne`, `lt`, `le`, `gt`, `ge`: Python's comparison of the value with `ref`;
- `re`, `re.I`, `re.I.M`, ...: `re.search(ref, value)` with the named `re` flags;
- `approx:T`: the value as a float lies within `T` of `ref` (a value that is no number fails);
- `range.XY`: `ref[0] <X value <Y ref[1]`, where `X` and `Y` are `t` (strict) or `e` (or
  equal), so `range.te` is `ref[0] < value <= ref[1]`;
- `spreadsheet_range`: the value (a multi-cell range) covers `ref[0]` and lies within `ref[1]`;
- `str_list_eq`, `str_set_eq`: the value, a comma-separated string with optional quotes
  around it (a list validation's formula, `"a,b"`), split into a list or set equal to `ref`.
"""

from __future__ import annotations

import functools
import operator
import re
from typing import Any

from openpyxl.worksheet.cell_range import MultiCellRange

__all__ = ["UnknownRuleMethod", "matches_rule"]

_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}


class UnknownRuleMethod(ValueError):
    """A value rule names a method OSWorld does not define."""


def _covers(outer: MultiCellRange, inner: MultiCellRange) -> bool:
    return all(cell_range in outer for cell_range in inner.ranges)


def matches_rule(value: Any, rule: dict[str, Any]) -> bool:
    """Whether `value` passes `rule` (`{"method": ..., "ref": ...}`, methods in the module doc).

    Raises:
        UnknownRuleMethod: `rule["method"]` is none of them.
    """
    method, reference = str(rule["method"]), rule.get("ref")
    if method.startswith("re"):
        flags = functools.reduce(operator.or_, (getattr(re, name) for name in method.split(".")[1:]),
                                 re.RegexFlag(0))
        return re.search(reference, value, flags) is not None
    if method in _COMPARISONS:
        return bool(getattr(operator, method)(value, reference))
    if method.startswith("approx:"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        return abs(number - reference) <= float(method.split(":", 1)[1])
    if method == "spreadsheet_range":
        return (_covers(value, MultiCellRange(reference[0]))
                and _covers(MultiCellRange(reference[1]), value))
    if method.startswith("range.") and len(method) == 8:
        low, high = getattr(operator, "l" + method[6]), getattr(operator, "l" + method[7])
        return bool(low(reference[0], value) and high(value, reference[1]))
    if method in ("str_list_eq", "str_set_eq"):
        container = list if method == "str_list_eq" else set
        return container(str(value).strip("\"'").split(",")) == container(reference)
    raise UnknownRuleMethod(
        f"value rule method {method!r} is not one of OSWorld's: eq, ne, lt, le, gt, ge, re[.FLAG...], "
        "approx:T, range.XY, spreadsheet_range, str_list_eq, str_set_eq")
