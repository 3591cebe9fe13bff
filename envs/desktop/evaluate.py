"""OSWorld-style evaluators: a getter reads the final desktop state, a metric scores it.

An evaluator is `{"func": metric, "result": getter, "expected": getter, "options": {...}}`, or
lists of each joined by `"conj": "and" | "or"`, as in OSWorld. Getters and metrics are looked up
by name; `check_evaluator` rejects an unknown one at reset, naming it, so a task never runs for
nothing. Getters named as in OSWorld behave as there; `window_titles`, `active_window_title`
and `accessibility_tree` are ours and read the X server. Chrome's getters and metrics are in
`envs.desktop.chrome` and `envs.desktop.chrome_metrics`, GIMP's and the image metrics in
`envs.desktop.gimp` and `envs.desktop.image_metrics`, VLC's in `envs.desktop.vlc`.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envs.desktop import chrome_metrics, file_cache, file_metrics, pdf_metrics, thunderbird
from envs.desktop.accessibility import A11yNode
from envs.desktop.chrome import CHROME_GETTERS
from envs.desktop.display import DesktopSession
from envs.desktop.docs_metrics import compare_docx_files, compare_docx_tables, compare_line_spacing
from envs.desktop.file_metrics import compare_text_file
from envs.desktop.gimp import get_gimp_config_file
from envs.desktop.image_metrics import IMAGE_METRICS
from envs.desktop.observe import Observer, screen_text
from envs.desktop.slides_metrics import compare_pptx_files
from envs.desktop.table_metrics import compare_table
from envs.desktop.task_cache import cache_file_name, task_cache_dir
from envs.desktop.vlc import VLC_GETTERS, VLC_METRICS
from envs.desktop.writer_metrics import WRITER_METRICS

__all__ = [
    "GETTERS",
    "METRICS",
    "EvalContext",
    "UnsupportedEvaluator",
    "check_evaluator",
    "evaluate",
    "terminal_output",
]

logger = logging.getLogger(__name__)


class UnsupportedEvaluator(ValueError):
    """A task names a getter or metric this env does not implement."""


@dataclass
class EvalContext:
    """What getters may read: the episode's desktop, its screen, and how the agent ended."""

    session: DesktopSession
    observer: Observer
    ended_by: str | None


def _command_output(context: EvalContext, config: dict[str, Any], stream: str) -> str:
    command = config["command"]
    result = context.session.run(
        command, shell=bool(config.get("shell", False)), timeout_s=float(config.get("timeout", 10))
    )
    return result.stdout if stream == "stdout" else result.stderr


def get_vm_command_line(context: EvalContext, config: dict[str, Any]) -> str:
    """Standard output of a command run on the desktop."""
    return _command_output(context, config, "stdout")


def get_vm_command_error(context: EvalContext, config: dict[str, Any]) -> str:
    """Standard error of a command run on the desktop."""
    return _command_output(context, config, "stderr")


def get_vm_file(context: EvalContext, config: dict[str, Any]) -> str | None | list[str | None]:
    """Host path of a private copy of a desktop file, or None if it does not exist (OSWorld
    copies it out of the VM).

    With `multi: true`, `path` and `dest` are lists and each file is copied into the task cache
    under its `dest` name, as OSWorld does, so files a metric reads together (a workbook and
    the CSV export beside it that `compare_table`'s `sheet_print` looks for) lie side by side
    under the names the task gave. `gives` (default `[0]`) picks which the metric gets, in the
    order of `path`, a missing one as None: one given is returned alone, several as a list.
    """
    if not config.get("multi", False):
        copy = context.session.copy_out(config["path"])
        return str(copy) if copy is not None else None
    paths, dests = list(config["path"]), list(config["dest"])
    if len(paths) != len(dests):
        raise ValueError(f"vm_file has {len(paths)} paths in 'path' but {len(dests)} names in "
                         "'dest'; give one name per path")
    folder = task_cache_dir(context.session)
    gives = set(config.get("gives", [0]))
    given: list[str | None] = []
    for index, (path, dest) in enumerate(zip(paths, dests, strict=True)):
        data = context.session.read_file(path)
        target = folder / cache_file_name(dest)
        if data is not None:
            target.write_bytes(data)
        if index in gives:
            given.append(str(target) if data is not None else None)
    return given[0] if len(given) == 1 else given


def get_rule(context: EvalContext, config: dict[str, Any]) -> Any:
    """The literal `rules` of the task."""
    return config["rules"]


def get_list_directory(context: EvalContext, config: dict[str, Any]) -> list[str] | None:
    """Sorted names in a desktop folder, or None if it is not a folder."""
    return context.session.list_dir(config["path"])


def get_window_titles(context: EvalContext, config: dict[str, Any]) -> str:
    """Titles of the open windows, one per line, top of the stack first."""
    return "\n".join(node.name for node in context.observer.tree())


def get_active_window_title(context: EvalContext, config: dict[str, Any]) -> str:
    """Title of the focused window ("" if none)."""
    return next((node.name for node in context.observer.tree() if node.focused), "")


# The terminal apps whose text `vm_terminal_output` reads: OSWorld's, and its stand-in here.
TERMINAL_APPS = ("gnome-terminal-server", "xfce4-terminal")


def terminal_output(nodes: Sequence[A11yNode]) -> str | None:
    """The text of the focused terminal in the active window of a terminal app, right-stripped,
    as OSWorld's `/terminal` reads it; None unless there is exactly one such terminal. The
    accessibility reader keeps the last `a11y_reader.MAX_TEXT` characters of a text, where
    OSWorld reads it whole."""
    found: list[str] = []
    frame_depth: int | None = None
    for node in nodes:
        if node.app not in TERMINAL_APPS:
            continue
        if frame_depth is not None and node.depth <= frame_depth:
            frame_depth = None
        if node.role == "frame" and "active" in node.states:
            frame_depth = node.depth
        elif frame_depth is not None and node.role == "terminal" and "focused" in node.states:
            found.append(node.text or "")
    return found[0].rstrip() if len(found) == 1 else None


def get_vm_terminal_output(context: EvalContext, config: dict[str, Any]) -> str | None:
    """What the terminal in front shows (`terminal_output`), read from the AT-SPI tree."""
    return terminal_output(context.session.read_accessibility())


def get_accessibility_tree(context: EvalContext, config: dict[str, Any]) -> str:
    """The same text the agent sees: the X listing and the AT-SPI tree."""
    return screen_text(context.observer, context.session)


def get_cloud_file(context: EvalContext, config: dict[str, Any]) -> str | list[str]:
    """OSWorld's `cloud_file`: expected files from the web, here served by the offline file
    cache (`file_cache`) and copied into the task cache under their `dest` names.

    `path` is a URL and `dest` its file name; with `multi: true` both are lists, and `gives`
    (default `[0]`) picks which files the metric gets, in the order of `path`. One file given
    is returned as its host path, several as a list of them.

    Raises:
        MissingDownload: the cache lacks a URL (all of them named, with how to add them).
    """
    multi = bool(config.get("multi", False))
    urls = list(config["path"]) if multi else [config["path"]]
    dests = list(config["dest"]) if multi else [config["dest"]]
    if len(urls) != len(dests):
        raise ValueError(f"cloud_file has {len(urls)} URLs in 'path' but {len(dests)} names in "
                         "'dest'; give one name per URL")
    if missing := [url for url in urls if file_cache.lookup(url) is None]:
        raise file_cache.MissingDownload(file_cache.explain_missing(None, missing))
    folder = task_cache_dir(context.session)
    gives = set(config.get("gives", [0]))
    given = []
    for index, (url, dest) in enumerate(zip(urls, dests, strict=True)):
        target = folder / cache_file_name(dest)
        shutil.copyfile(file_cache.lookup(url), target)  # a metric may not alter the cache
        if index in gives:
            given.append(str(target))
    return given[0] if len(given) == 1 else given


def get_cache_file(context: EvalContext, config: dict[str, Any]) -> str | None:
    """OSWorld's `cache_file`: the host path of the file named `path` in the task cache, or
    None when nothing left it there (OSWorld asserts that it exists; here the metric gets
    None and scores 0). `execute` and `command` steps with a `stdout` or `stderr` option
    write such files, as do `cloud_file` and `vm_file` with `multi`."""
    folder = task_cache_dir(context.session).resolve()
    path = (folder / str(config["path"])).resolve()
    if not path.is_relative_to(folder):
        raise ValueError(f"cache_file's path {config['path']!r} leaves the task cache; name a "
                         "file in it, such as 'ls.out'")
    return str(path) if path.is_file() else None


GETTERS: dict[str, Callable[[EvalContext, dict[str, Any]], Any]] = {
    "vm_command_line": get_vm_command_line,
    "vm_command_error": get_vm_command_error,
    "vm_file": get_vm_file,
    "rule": get_rule,
    "list_directory": get_list_directory,
    "window_titles": get_window_titles,
    "active_window_title": get_active_window_title,
    "accessibility_tree": get_accessibility_tree,
    "vm_terminal_output": get_vm_terminal_output,
    "cloud_file": get_cloud_file,
    "cache_file": get_cache_file,
    **CHROME_GETTERS,
    "gimp_config_file": get_gimp_config_file,
    **VLC_GETTERS,
}


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    """1 if the result equals `rules["expected"]` exactly."""
    return float(result == rules["expected"])


def check_include_exclude(result: Any, rules: dict[str, Any]) -> float:
    """1 if the text holds every `include` string and no `exclude` string."""
    if result is None:
        return 0.0
    text = str(result)
    included = all(part in text for part in rules.get("include", []))
    excluded = not any(part in text for part in rules.get("exclude", []))
    return float(included and excluded)


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    """1 if `rules["expected"]` is an element of the result list."""
    return float(result is not None and rules["expected"] in result)


def literal_match(result: Any, expected: Any, **options: Any) -> float:
    """1 if the result equals the expected value (`ignore_case` for strings)."""
    if options.get("ignore_case") and isinstance(result, str) and isinstance(expected, str):
        return float(result.lower() == expected.lower())
    return float(result == expected)


def check_moved_jpgs(result: Any, rules: dict[str, Any]) -> float:
    """1 if the folder holds exactly the `rules["expected"]` file names (OSWorld's check for
    "copy every .jpg into cpjpg"); the folder is OSWorld's tree (`{"children": [{"name":
    ...}]}`) or our `list_directory` list of names."""
    if result is None:
        return 0.0
    children = result.get("children", []) if isinstance(result, dict) else result
    names = [child["name"] if isinstance(child, dict) else str(child) for child in children]
    expected = list(rules["expected"])
    return float(len(names) == len(expected) and set(names) == set(expected))


def check_direct_json_object(result: Any, rules: dict[str, Any]) -> float:
    """OSWorld's check of a JSON object (a dict, or its text with ' for "): 1 if each key of
    `rules["expected"]` has the expected value, or with `rules["expect_in_result"]`, if each
    expected string is a substring of the result's value and, for an expected list, one of its
    items is in the result's list.

    Raises:
        json.JSONDecodeError: the result is text that is no JSON (OSWorld raises too).
    """
    if isinstance(result, str):
        result = json.loads(result.strip().replace("'", '"'))
    if not isinstance(result, dict):
        return 0.0
    expected: dict[str, Any] = rules["expected"]
    if not rules.get("expect_in_result", False):
        return float(all(result.get(key) == value for key, value in expected.items()))
    for key, value in expected.items():
        found = result.get(key)
        if isinstance(value, list):
            if not (isinstance(found, list) and any(item in found for item in value)):
                return 0.0
        elif not (isinstance(value, str) and _contains(found, value)):
            return 0.0  # an expected value of another type fails, as in OSWorld
    return 1.0


def _contains(container: Any, item: Any) -> bool:
    try:
        return item in container
    except TypeError:  # a missing key (None) or a number holds nothing
        return False


METRICS: dict[str, Callable[..., float]] = {
    "check_moved_jpgs": check_moved_jpgs,
    "exact_match": exact_match,
    "check_include_exclude": check_include_exclude,
    "compare_text_file": compare_text_file,
    "is_in_list": is_in_list,
    "literal_match": literal_match,
    "check_direct_json_object": check_direct_json_object,
    "compare_table": compare_table,
    "compare_pptx_files": compare_pptx_files,
    "compare_docx_files": compare_docx_files,
    "compare_line_spacing": compare_line_spacing,
    "compare_docx_tables": compare_docx_tables,
    "is_expected_active_tab": chrome_metrics.is_expected_active_tab,
    "is_expected_url_pattern_match": chrome_metrics.is_expected_url_pattern_match,
    "is_expected_tabs": chrome_metrics.is_expected_tabs,
    "is_expected_bookmarks": chrome_metrics.is_expected_bookmarks,
    "is_expected_installed_extensions": chrome_metrics.is_expected_installed_extensions,
    "check_list": chrome_metrics.check_list,
    "check_font_size": chrome_metrics.check_font_size,
    "check_enabled_experiments": chrome_metrics.check_enabled_experiments,
    "is_cookie_deleted": chrome_metrics.is_cookie_deleted,
    "check_history_deleted": chrome_metrics.check_history_deleted,
    "is_shortcut_on_desktop": chrome_metrics.is_shortcut_on_desktop,
    "is_added_to_steam_cart": chrome_metrics.is_added_to_steam_cart,
    "compare_csv": file_metrics.compare_csv,
    "check_csv": file_metrics.check_csv,
    "check_json": file_metrics.check_json,
    "diff_text_file": file_metrics.diff_text_file,
    "compare_archive": file_metrics.compare_archive,
    "compare_zip_files": file_metrics.compare_zip_files,
    "run_sqlite3": file_metrics.run_sqlite3,
    "file_contains": file_metrics.file_contains,
    "check_line_number": file_metrics.check_line_number,
    "compare_python_pure_text": file_metrics.compare_python_pure_text,
    "compare_pdfs": pdf_metrics.compare_pdfs,
    "check_pdf_pages": pdf_metrics.check_pdf_pages,
    "check_thunderbird_prefs": thunderbird.check_thunderbird_prefs,
    "check_thunderbird_filter": thunderbird.check_thunderbird_filter,
    **WRITER_METRICS,
    **IMAGE_METRICS,
    **VLC_METRICS,
}
INFEASIBLE = "infeasible"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def unsupported_evaluator_parts(evaluator: dict[str, Any]) -> list[str]:
    """One line per metric or getter of `evaluator` this env lacks; empty when all exist."""
    problems = [f"unsupported evaluator func {func!r}" for func in _as_list(evaluator.get("func"))
                if func != INFEASIBLE and func not in METRICS]
    for key in ("result", "expected"):
        for getter in _as_list(evaluator.get(key, [])):
            getter_type = getter.get("type") if isinstance(getter, dict) else None
            if getter_type not in GETTERS:
                problems.append(f"unsupported evaluator {key} getter type {getter_type!r}")
    return problems


def check_evaluator(evaluator: dict[str, Any], task_id: str) -> None:
    """Raise `UnsupportedEvaluator` naming every unknown metric and getter of a task."""
    if problems := unsupported_evaluator_parts(evaluator):
        raise UnsupportedEvaluator(
            f"task {task_id!r}: {'; '.join(problems)}; supported funcs: "
            f"{', '.join([*METRICS, INFEASIBLE])}; supported getters: {', '.join(GETTERS)}"
        )


def evaluate(evaluator: dict[str, Any], context: EvalContext) -> float:
    """Score the final state in [0, 1], the way OSWorld's `DesktopEnv.evaluate` does."""
    funcs = _as_list(evaluator["func"])
    if funcs == [INFEASIBLE]:
        return float(context.ended_by == "FAIL")
    if context.ended_by == "FAIL":
        return 0.0  # declaring a feasible task infeasible scores nothing
    results = _as_list(evaluator.get("result", [None] * len(funcs)))
    expecteds = _as_list(evaluator.get("expected", [None] * len(funcs)))
    options = _as_list(evaluator.get("options", [{}] * len(funcs)))
    scores = []
    for func, result, expected, option in zip(funcs, results, expecteds, options, strict=True):
        result_state = GETTERS[result["type"]](context, result) if result else None
        metric = METRICS[func]
        if expected:
            expected_state = GETTERS[expected["type"]](context, expected)
            score = metric(result_state, expected_state, **(option or {}))
        else:
            score = metric(result_state, **(option or {}))
        logger.debug("metric %s -> %s", func, score)
        scores.append(float(score))
        if evaluator.get("conj", "and") == "and" and score == 0:
            return 0.0
    if evaluator.get("conj", "and") == "or":
        return max(scores)
    return sum(scores) / len(scores)
