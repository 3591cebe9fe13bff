"""How much of an OSWorld task set this env runs: per task, the parts of OSWorld's format it
lacks and the apps this machine lacks; per domain, how many tasks are left.

A task's *format is implemented* when `check_task` accepts it and every parameter its set-up
steps pass, every key its getters read and every option its metrics take is one this env
handles (`STEP_PARAMETERS`, `GETTER_KEYS`, `METRIC_OPTIONS`: registering a name is not
implementing it). It *runs here* when, besides, every app it needs is installed: the apps its
`related_apps` name, the programs its steps launch or execute, and the Python modules its
`python -c` steps import into the desktop's python3. A task that needs an online account
(a `googledrive` or `login` step, a Google Drive getter, a Drive URL that is not a plain file
download) is *online*: named, never counted as implemented.

Everything here is a pure function of task dicts, except `installed_here`, which asks this
machine; no X server starts. `agent-rl desktop coverage DIR` prints the report.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from envs.desktop.apps import (
    APPS,
    BROWSER_STAND_INS,
    DESKTOP_PATH,
    FILE_VIEWERS,
    OSWORLD_APPS,
    PYTHON_SITE,
)
from envs.desktop.chrome_metrics import PREFERENCE_READERS
from envs.desktop.docs_metrics import DOCX_OPTIONS
from envs.desktop.evaluate import GETTERS, INFEASIBLE, METRICS
from envs.desktop.file_cache import task_urls
from envs.desktop.image_metrics import IMAGE_METRICS
from envs.desktop.office import DOCUMENT_MODULES, module_of
from envs.desktop.setup_steps import SUPPORTED_STEPS
from envs.desktop.slides_metrics import SLIDE_OPTIONS
from envs.desktop.table_metrics import FUZZY_CHECK_KEYS, PARTIAL_RULES, RULE_KEYS, RULE_PROPERTIES
from envs.desktop.tasks import TaskFormatError, UnsupportedTaskParts, check_task
from envs.desktop.vlc import VLC_METRICS
from envs.desktop.writer_metrics import WRITER_OPTIONS
from envs.errors import EnvsError

__all__ = [
    "GETTER_KEYS",
    "METRIC_OPTIONS",
    "ONLINE_GETTERS",
    "ONLINE_STEPS",
    "RELATED_APPS",
    "STEP_PARAMETERS",
    "App",
    "CoverageError",
    "CoverageReport",
    "DomainCoverage",
    "Part",
    "TaskCoverage",
    "coverage_report",
    "installed_here",
    "load_osworld_tasks",
    "needs_google_drive",
    "task_coverage",
]

# The parameters each supported set-up step reads. OSWorld's `execute` also takes `until` (run
# again until the output holds a string); ours does not, and no task of its set passes it.
STEP_PARAMETERS: dict[str, frozenset[str]] = {
    "download": frozenset({"files"}),
    "launch": frozenset({"command", "shell"}),
    "execute": frozenset({"command", "shell", "timeout", "stdout", "stderr"}),
    "command": frozenset({"command", "shell", "timeout", "stdout", "stderr"}),
    "sleep": frozenset({"seconds"}),
    "open": frozenset({"path"}),
    "activate_window": frozenset({"window_name", "strict", "by_class"}),
    "close_window": frozenset({"window_name", "strict", "by_class"}),
    "upload_file": frozenset({"files"}),
    "create_file": frozenset({"path", "content"}),
    "chrome_open_tabs": frozenset({"urls_to_open"}),
    "chrome_close_tabs": frozenset({"urls_to_close"}),
}
# The keys each getter reads besides `type`. A single `vm_file`'s `dest` only names OSWorld's
# local copy; ours keeps the desktop file's name, so a metric sees the same file type. With
# `multi` the files are copied under their `dest` names. Its `time_suffix` is not handled.
GETTER_KEYS: dict[str, frozenset[str]] = {
    "vm_command_line": frozenset({"command", "shell", "timeout"}),
    "vm_command_error": frozenset({"command", "shell", "timeout"}),
    "vm_terminal_output": frozenset(),
    "vm_file": frozenset({"path", "dest", "multi", "gives"}),
    "rule": frozenset({"rules"}),
    "list_directory": frozenset({"path"}),
    "window_titles": frozenset(),
    "active_window_title": frozenset(),
    "accessibility_tree": frozenset(),
    "cloud_file": frozenset({"path", "dest", "multi", "gives"}),
    "cache_file": frozenset({"path"}),
    # Chrome's (`envs.desktop.chrome`). `active_tab_info` and `active_tab_html_parse` read the
    # active tab itself, so their `goto_prefix` (where OSWorld reloads it from) changes nothing.
    "active_url_from_accessTree": frozenset({"goto_prefix"}),
    "active_tab_info": frozenset({"goto_prefix"}),
    "active_tab_html_parse": frozenset({"goto_prefix", "category", "class_multiObject",
                                        "class_singleObject", "labelObject", "xpathObject",
                                        "inputObject"}),
    "active_tab_url_parse": frozenset({"goto_prefix", "parse_keys", "replace"}),
    "url_dashPart": frozenset({"goto_prefix", "partIndex", "needDeleteId", "returnType",
                               "key"}),
    "open_tabs_info": frozenset(),
    "page_info": frozenset({"url"}),
    "bookmarks": frozenset(),
    "history": frozenset({"dest"}),
    "cookie_data": frozenset({"dest"}),
    "rule_relativeTime": frozenset({"rules"}),
    "shortcuts_on_desktop": frozenset(),
    **{name: frozenset() for name in PREFERENCE_READERS},
    # GIMP's and VLC's (`envs.desktop.gimp`, `envs.desktop.vlc`); `dest` names OSWorld's copy.
    "gimp_config_file": frozenset({"file_name", "dest"}),
    "vlc_config": frozenset({"dest"}),
    "vlc_playing_info": frozenset({"dest"}),
    "vm_screen_size": frozenset(),
    "vm_window_size": frozenset({"app_class_name"}),
}
# The `options` each metric takes. OSWorld's `literal_match` also takes `type: list`.
# `compare_table`'s rules are checked one by one (`_table_rule_parts`): each rule's type, keys
# and property names count as options (`compare_table.rules[chart].chart_props[anchor]`).
METRIC_OPTIONS: dict[str, frozenset[str]] = {
    "exact_match": frozenset(),
    "check_include_exclude": frozenset(),
    "compare_text_file": frozenset({"ignore_blanks", "ignore_case"}),
    "is_in_list": frozenset(),
    "literal_match": frozenset({"ignore_case"}),
    "check_moved_jpgs": frozenset(),
    "check_direct_json_object": frozenset(),
    "compare_table": frozenset({"rules"}),
    "compare_pptx_files": SLIDE_OPTIONS,
    "compare_docx_files": DOCX_OPTIONS,
    "compare_line_spacing": frozenset(),
    "compare_docx_tables": frozenset(),
    "is_expected_active_tab": frozenset(),
    "is_expected_url_pattern_match": frozenset(),
    "is_expected_tabs": frozenset(),
    "is_expected_bookmarks": frozenset(),
    "is_expected_installed_extensions": frozenset(),
    "check_list": frozenset(),
    "check_font_size": frozenset(),
    "check_enabled_experiments": frozenset(),
    "is_cookie_deleted": frozenset(),
    "check_history_deleted": frozenset(),
    "is_shortcut_on_desktop": frozenset(),
    "is_added_to_steam_cart": frozenset(),
    "compare_csv": frozenset({"strict", "ignore_case"}),
    "check_csv": frozenset(),
    "check_json": frozenset({"is_yaml"}),
    "diff_text_file": frozenset(),
    "compare_archive": frozenset({"file_path", "file_type"}),
    "compare_zip_files": frozenset(),
    "run_sqlite3": frozenset(),
    "file_contains": frozenset(),
    "check_line_number": frozenset(),
    "compare_python_pure_text": frozenset(),
    "compare_pdfs": frozenset(),
    "check_pdf_pages": frozenset(),
    "check_thunderbird_prefs": frozenset(),
    "check_thunderbird_filter": frozenset(),
    **WRITER_OPTIONS,
    **{name: frozenset() for name in IMAGE_METRICS},
    **{name: frozenset() for name in VLC_METRICS},
}
_EVALUATOR_KEYS = frozenset({"func", "result", "expected", "options", "conj", "postconfig"})
# `open` is xdg-open in OSWorld's VM, which picks the app by file type; here folders go to the
# file manager, office documents to LibreOffice (`office.DOCUMENT_MODULES`), PDFs to Evince
# (`apps.FILE_VIEWERS`) and other files to the text editor, which is right for text files only
# (JSON included: Ubuntu opens it in its text editor).
_OPENED_AS_TEXT = frozenset({"", ".txt", ".md", ".py", ".sh", ".log", ".c", ".h", ".js",
                             ".yaml", ".yml", ".ini", ".conf", ".tex", ".json"})

# Parts that need an online account: no offline cache can stand in for them.
ONLINE_STEPS = {"googledrive": "googledrive step", "login": "login step"}
ONLINE_GETTERS = {"googledrive_file": "googledrive_file getter"}
_GOOGLE_DRIVE_HOSTS = {"drive.google.com", "docs.google.com", "drive.usercontent.google.com"}


class CoverageError(EnvsError):
    """An OSWorld task folder is not where or what it should be."""


@dataclass(frozen=True)
class App:
    """Something a task needs installed: any one of `programs` on PATH, or, with
    `python_module`, a module that the desktop's python3 imports."""

    name: str
    programs: tuple[str, ...] = ()
    python_module: str | None = None


_TERMINAL = App("terminal", tuple(argv[0] for argv in APPS["terminal"]))
_CHROME = App("chrome", ("google-chrome", "chromium"))
_LIBREOFFICE = App("libreoffice", ("libreoffice", "soffice"))
_VS_CODE = App("code", ("code",))
# OSWorld's `related_apps` names (lower case, spaces as `_`) -> what must be installed; None
# for names of file kinds, whose app the task's own steps launch.
RELATED_APPS: dict[str, App | None] = {
    "os": _TERMINAL,
    "terminal": _TERMINAL,
    "chrome": _CHROME,
    "browser": _CHROME,
    "libreoffice": _LIBREOFFICE,
    "libreoffice_calc": _LIBREOFFICE,
    "libreoffice_writer": _LIBREOFFICE,
    "libreoffice_impress": _LIBREOFFICE,
    "calc": _LIBREOFFICE,
    "writer": _LIBREOFFICE,
    "impress": _LIBREOFFICE,
    "gimp": App("gimp", ("gimp",)),
    "vlc": App("vlc", ("vlc",)),
    "thunderbird": App("thunderbird", ("thunderbird",)),
    "vscode": _VS_CODE,
    "vs_code": _VS_CODE,
    "pdf": None,
    "image": None,
}


@functools.cache
def installed_here(app: App) -> bool:
    """Whether this machine has `app` where the desktop's sandbox would find it. A module is
    looked up, not imported: pyautogui's import needs an X display."""
    if app.python_module is not None:
        python = shutil.which("python3", path=DESKTOP_PATH)
        find = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
        return python is not None and subprocess.run(
            [python, "-c", find, app.python_module], capture_output=True, timeout=60,
            env={"PATH": DESKTOP_PATH, "PYTHONPATH": PYTHON_SITE},
        ).returncode == 0
    return any(shutil.which(program) for program in app.programs)


@dataclass(frozen=True, order=True)
class Part:
    """A piece of OSWorld's format: `kind` is step, getter, metric, option or task; an option
    is named `<part>.<key>` (`vm_file.multi`, `execute.stdout`)."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class TaskCoverage:
    """What one task needs that this env or this machine lacks."""

    domain: str
    task_id: str
    missing_parts: tuple[Part, ...]
    online: tuple[str, ...]  # why it needs an online account; empty when it does not
    missing_apps: tuple[str, ...]  # App names

    @property
    def implemented(self) -> bool:
        """Every part of its format is implemented, and it needs no online account."""
        return not self.missing_parts and not self.online

    @property
    def runnable(self) -> bool:
        """Implemented, and every app it needs is installed here."""
        return self.implemented and not self.missing_apps


@dataclass(frozen=True)
class DomainCoverage:
    """One domain's counts."""

    domain: str
    tasks: int
    implemented: int
    runnable: int
    online: int


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _getters(evaluator: dict[str, Any]) -> list[dict[str, Any]]:
    return [getter for key in ("result", "expected") for getter in _as_list(evaluator.get(key))
            if isinstance(getter, dict)]


def _steps(task: dict[str, Any]) -> list[dict[str, Any]]:
    evaluator = task.get("evaluator") or {}
    return [step for step in [*task.get("config", []), *evaluator.get("postconfig", [])]
            if isinstance(step, dict)]


def needs_google_drive(url: str) -> bool:
    """Whether `url` is a Google Drive or Docs page rather than a plain file download link
    (`drive.google.com/uc?id=...`, `drive.usercontent.google.com/download?id=...`), which
    anyone may fetch and the offline cache serves like any URL."""
    parsed = urlparse(url)
    if parsed.hostname not in _GOOGLE_DRIVE_HOSTS:
        return False
    download_link = ((parsed.hostname == "drive.google.com" and parsed.path == "/uc")
                     or (parsed.hostname == "drive.usercontent.google.com"
                         and parsed.path.startswith("/download")))
    return not download_link


def _online_reasons(task: dict[str, Any]) -> list[str]:
    reasons = [ONLINE_STEPS[step.get("type")] for step in _steps(task)
               if step.get("type") in ONLINE_STEPS]
    reasons += [ONLINE_GETTERS[getter.get("type")] for getter in
                _getters(task.get("evaluator") or {}) if getter.get("type") in ONLINE_GETTERS]
    reasons += [f"Google Drive page {url}" for url in task_urls(task)
                if isinstance(url, str) and needs_google_drive(url)]
    return list(dict.fromkeys(reasons))


def _step_parts(step: dict[str, Any]) -> list[Part]:
    step_type, parameters = step.get("type"), step.get("parameters") or {}
    if step_type in ONLINE_STEPS:
        return []
    if step_type not in SUPPORTED_STEPS:
        return [Part("step", str(step_type))]
    parts = [Part("option", f"{step_type}.{key}") for key in parameters
             if key not in STEP_PARAMETERS[step_type]]
    if step_type == "open" and isinstance(parameters.get("path"), str):
        suffix = PurePosixPath(parameters["path"]).suffix.lower()
        if (suffix not in _OPENED_AS_TEXT and suffix not in DOCUMENT_MODULES
                and suffix not in FILE_VIEWERS):
            parts.append(Part("option", f"open.path *{suffix} (xdg-open's app for it)"))
    return parts


def _table_rule_parts(rules: Any) -> list[Part]:
    """The parts of `compare_table`'s rules that `table_metrics` does not implement."""
    parts = []
    for rule in rules if isinstance(rules, list) else []:
        rule_type = rule.get("type")
        name = f"compare_table.rules[{rule_type}]"
        if rule_type not in RULE_KEYS:
            parts.append(Part("option", name))
            continue
        if rule_type in PARTIAL_RULES:
            parts.append(Part("option", f"{name} ({PARTIAL_RULES[rule_type]})"))
        parts += [Part("option", f"{name}.{key}") for key in rule if key not in RULE_KEYS[rule_type]]
        if rule_type in RULE_PROPERTIES:
            key, handled = RULE_PROPERTIES[rule_type]
            parts += [Part("option", f"{name}.{key}[{prop}]") for prop in rule.get(key) or []
                      if prop not in handled]
        if rule_type == "sheet_fuzzy":
            parts += [Part("option", f"{name}.rules.{key}") for check in rule.get("rules", [])
                      for key in check if key not in FUZZY_CHECK_KEYS]
    return parts


def _evaluator_parts(evaluator: dict[str, Any]) -> list[Part]:
    parts = [Part("option", f"evaluator.{key}") for key in evaluator if key not in _EVALUATOR_KEYS]
    if evaluator.get("conj", "and") not in ("and", "or"):
        parts.append(Part("option", f"evaluator.conj={evaluator['conj']}"))
    funcs = _as_list(evaluator.get("func"))
    options = _as_list(evaluator.get("options") or [{}] * len(funcs))
    for func, option in zip(funcs, options + [{}] * (len(funcs) - len(options)), strict=False):
        if func == INFEASIBLE:
            continue
        if func not in METRICS:
            parts.append(Part("metric", str(func)))
            continue
        parts += [Part("option", f"{func}.{key}") for key in (option or {})
                  if key not in METRIC_OPTIONS[func]]
        if func == "compare_table":
            parts += _table_rule_parts((option or {}).get("rules"))
    for getter in _getters(evaluator):
        getter_type = getter.get("type")
        if getter_type in ONLINE_GETTERS:
            continue
        if getter_type not in GETTERS:
            parts.append(Part("getter", str(getter_type)))
            continue
        parts += [Part("option", f"{getter_type}.{key}") for key in getter
                  if key != "type" and key not in GETTER_KEYS[getter_type]]
    return parts


def _format_parts(task: dict[str, Any]) -> list[Part]:
    parts = [part for step in _steps(task) for part in _step_parts(step)]
    parts += _evaluator_parts(task.get("evaluator") or {})
    try:
        check_task(task)
    except TaskFormatError as error:
        parts.append(Part("task", str(error).replace(f"task {task.get('id', '?')!r} ", "", 1)))
    except UnsupportedTaskParts as error:
        if not parts:  # the tables above would then have missed a name check_task knows
            parts.append(Part("task", f"refused by check_task: {error}"))
    return list(dict.fromkeys(parts))


def _program(argv0: str) -> App:
    """A launched program; OSWorld's GNOME apps and Google Chrome may be played by this
    desktop's stand-ins (`apps.stand_in`)."""
    role = OSWORLD_APPS.get(argv0)
    stand_ins = tuple(argv[0] for argv in APPS[role]) if role else ()
    if argv0 in BROWSER_STAND_INS:
        stand_ins = (BROWSER_STAND_INS[argv0],)
    return App(PurePosixPath(argv0).name, (argv0, *stand_ins))


_IMPORT = re.compile(r"(?:^|[;\n]|\s)(?:import\s+([\w., ]+)|from\s+(\w+)[\w.]*\s+import)")


def _python_modules(code: str) -> list[str]:
    names = []
    for plain, source in _IMPORT.findall(code):
        names += [name.strip().split(".")[0] for name in plain.split(",")] if plain else [source]
    return [name.split()[0] for name in names
            if name and name.split()[0] not in sys.stdlib_module_names]


def _step_apps(step: dict[str, Any]) -> list[App]:
    """What a `launch`, `execute` or `command` step runs, and the LibreOffice an `open` of an
    office document starts. Shell command lines are not parsed."""
    parameters = step.get("parameters") or {}
    if step.get("type") == "open":
        path = parameters.get("path")
        if not isinstance(path, str):
            return []
        viewer = FILE_VIEWERS.get(PurePosixPath(path).suffix.lower())
        return [_LIBREOFFICE] if module_of(path) else [App(viewer, (viewer,))] if viewer else []
    if step.get("type") not in ("launch", "execute", "command"):
        return []
    command = parameters.get("command")
    if parameters.get("shell") or not command:
        return []
    argv = shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]
    if step["type"] != "launch" and argv[0] == "python":  # the env runs python3 for it
        argv = ["python3", *argv[1:]]
    apps = [_program(argv[0])]
    if PurePosixPath(argv[0]).name.startswith("python") and "-c" in argv[1:-1]:
        code = argv[argv.index("-c") + 1]
        apps += [App(f"{module} (python3 module)", python_module=module)
                 for module in _python_modules(code)]
    return apps


def _needed_apps(task: dict[str, Any]) -> list[App]:
    apps = []
    for name in task.get("related_apps") or []:
        key = str(name).strip().lower().replace(" ", "_")
        apps.append(RELATED_APPS[key] if key in RELATED_APPS else App(key, (key,)))
    apps += [app for step in _steps(task) for app in _step_apps(step)]
    return list(dict.fromkeys(app for app in apps if app is not None))


def task_coverage(task: dict[str, Any], domain: str,
                  installed: Callable[[App], bool] = installed_here) -> TaskCoverage:
    """What `task` (an OSWorld task dict of `domain`) needs that this env lacks, and, through
    `installed`, which of its apps this machine lacks."""
    missing_apps = [app.name for app in _needed_apps(task) if not installed(app)]
    return TaskCoverage(
        domain=domain,
        task_id=str(task.get("id", "?")),
        missing_parts=tuple(_format_parts(task)),
        online=tuple(_online_reasons(task)),
        missing_apps=tuple(dict.fromkeys(missing_apps)),
    )


@dataclass(frozen=True)
class CoverageReport:
    """Every task's coverage, and the counts the CLI prints."""

    tasks: tuple[TaskCoverage, ...]

    def domains(self) -> list[DomainCoverage]:
        """Per domain, in the order the task index lists them."""
        names = list(dict.fromkeys(task.domain for task in self.tasks))
        return [DomainCoverage(
            domain=name,
            tasks=len(tasks := [task for task in self.tasks if task.domain == name]),
            implemented=sum(task.implemented for task in tasks),
            runnable=sum(task.runnable for task in tasks),
            online=sum(bool(task.online) for task in tasks),
        ) for name in names]

    def online_tasks(self) -> list[TaskCoverage]:
        """The tasks that need an online account."""
        return [task for task in self.tasks if task.online]

    def missing_parts(self) -> list[tuple[Part, int]]:
        """Each missing part with the number of tasks (online ones aside) that use it, most
        frequent first."""
        counts = Counter(part for task in self.tasks if not task.online
                         for part in task.missing_parts)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def missing_apps(self) -> list[tuple[str, int]]:
        """Each missing app with the number of tasks (online ones aside) that need it, most
        frequent first."""
        counts = Counter(app for task in self.tasks if not task.online
                         for app in task.missing_apps)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: the same tables the CLI prints, and every task."""
        domains = self.domains()
        return {
            "domains": [vars(domain) for domain in domains],
            "total": {key: sum(getattr(domain, key) for domain in domains)
                      for key in ("tasks", "implemented", "runnable", "online")},
            "missing_parts": [{"kind": part.kind, "name": part.name, "tasks": count}
                              for part, count in self.missing_parts()],
            "missing_apps": [{"app": app, "tasks": count} for app, count in self.missing_apps()],
            "online": [{"domain": task.domain, "id": task.task_id, "needs": list(task.online)}
                       for task in self.online_tasks()],
            "tasks": [{"domain": task.domain, "id": task.task_id,
                       "implemented": task.implemented, "runnable": task.runnable,
                       "missing_parts": [str(part) for part in task.missing_parts],
                       "online": list(task.online), "missing_apps": list(task.missing_apps)}
                      for task in self.tasks],
        }


    def to_markdown(self, top: int = 20) -> str:
        """The per-domain table, then the `top` most needed missing parts and every missing
        app, as Markdown tables (for the docs)."""
        total = self.to_json()["total"]
        lines = ["| domain | tasks | format implemented | runs here | online (unsupported) |",
                 "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| `{row.domain}` | {row.tasks} | {row.implemented} | {row.runnable} | "
                  f"{row.online} |" for row in self.domains()]
        lines += [f"| total | {total['tasks']} | {total['implemented']} | {total['runnable']} | "
                  f"{total['online']} |", "", "| missing from the env | tasks |", "| --- | ---: |"]
        lines += [f"| {part.kind} `{part.name}` | {count} |"
                  for part, count in self.missing_parts()[:top]]
        lines += ["", "| missing on this machine | tasks |", "| --- | ---: |"]
        lines += [f"| `{app}` | {count} |" for app, count in self.missing_apps()]
        return "\n".join(lines) + "\n"


def coverage_report(tasks: Iterable[tuple[str, dict[str, Any]]],
                    installed: Callable[[App], bool] = installed_here) -> CoverageReport:
    """The coverage of `(domain, task)` pairs."""
    return CoverageReport(tuple(task_coverage(task, domain, installed) for domain, task in tasks))


def load_osworld_tasks(folder: str | Path, index: str = "test_all.json"
                       ) -> list[tuple[str, dict[str, Any]]]:
    """`(domain, task)` for every task that `index` (`{"<domain>": ["<id>", ...]}`) lists in
    an OSWorld `evaluation_examples` folder (or a checkout of OSWorld that holds one), read
    from `examples/<domain>/<id>.json`.

    Raises:
        CoverageError: the index or a task file it lists is missing or not JSON.
    """
    folder = Path(folder)
    if not (folder / index).is_file() and (folder / "evaluation_examples" / index).is_file():
        folder = folder / "evaluation_examples"
    index_path = folder / index
    if not index_path.is_file():
        raise CoverageError(f"{index_path} does not exist; pass OSWorld's evaluation_examples "
                            "folder, which holds test_all.json and examples/<domain>/<id>.json")
    pairs = []
    for domain, task_ids in _read_json(index_path).items():
        for task_id in task_ids:
            path = folder / "examples" / domain / f"{task_id}.json"
            if not path.is_file():
                raise CoverageError(f"{index_path.name} lists {domain}/{task_id}, but {path} "
                                    "does not exist; is the checkout complete?")
            pairs.append((domain, _read_json(path)))
    return pairs


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CoverageError(f"{path} is not JSON: {error}") from error
