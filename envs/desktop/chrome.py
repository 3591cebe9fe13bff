"""Chromium on the desktop for OSWorld's Chrome tasks: its start, OSWorld's Chrome set-up steps
and getters.

OSWorld's tasks launch `google-chrome --remote-debugging-port=1337` (and socat, relaying the
port to 9222 for the host). Debian packages Chromium, not Google Chrome, so `google-chrome`
launched by name starts `chromium` with the task's flags kept (`apps.stand_in`). Either way the
browser starts in the desktop's sandbox with a few flags of ours (`CHROMIUM_FLAGS`): its profile
where OSWorld's getters read Chrome's (`~/.config/google-chrome` in the episode's home), no
first-run page, and its DevTools protocol on a pipe (`envs.desktop.devtools`), which is how the
steps and getters here drive it from the host without sharing a network with the sandbox. The
pipe's client serves the pages the browser asks for from the offline file cache.

Getters read what OSWorld's read, from the live browser where OSWorld asks the browser:
- the active tab is the one whose page is visible (`document.visibilityState`); its URL, shown
  as Chrome's address bar shows it (`chrome_metrics.omnibox_text`) after `goto_prefix`, is what
  `active_url_from_accessTree` returns and what `active_tab_url_parse` and `url_dashPart` parse;
- `active_tab_info` and `active_tab_html_parse` read the active tab's own page (OSWorld loads its
  URL again in a new tab, which offline would show nothing new);
- the profile's files (`Preferences`, `Local State`, `Bookmarks`, `History`, `Cookies`) are
  written by Chromium seconds after a change, so getters that read them first close the browser
  (`Browser.close`), which writes them all. Getters after that in the same evaluator see no
  browser (no tabs).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from envs.desktop import file_cache
from envs.desktop.chrome_metrics import (
    PREFERENCE_READERS,
    compare_urls,
    omnibox_text,
    read_preference,
    relative_rules,
    url_dash_part,
    url_query_values,
)
from envs.desktop.devtools import COMMAND_FD, MESSAGE_FD, DevTools, DevToolsError
from envs.desktop.display import VM_HOME, DesktopSession

if TYPE_CHECKING:
    from envs.desktop.evaluate import EvalContext

__all__ = [
    "CHROME_GETTERS",
    "CHROME_PROGRAMS",
    "CHROMIUM_FLAGS",
    "PROFILE_DIR",
    "Browser",
    "cached_page",
    "is_chrome",
    "open_tabs",
    "close_tabs",
    "start_browser",
]

logger = logging.getLogger(__name__)

CHROME_PROGRAMS = frozenset({"google-chrome", "google-chrome-stable", "chromium",
                             "chromium-browser"})
PROFILE_DIR = f"{VM_HOME}/.config/google-chrome"
CHROMIUM_FLAGS = ("--remote-debugging-pipe", f"--user-data-dir={PROFILE_DIR}", "--no-first-run",
                  "--no-default-browser-check", "--password-store=basic",
                  "--disable-background-networking")
# A cold start of Chromium on a loaded two-core machine takes tens of seconds.
START_TIMEOUT_S = 90.0
LOAD_TIMEOUT_S = 15.0  # a tab's load: cached pages are local, uncached ones fail at once
CLOSE_TIMEOUT_S = 20.0

_LABEL_JS = """(needle => {
  const norm = s => s.toLowerCase().replace(/\\s+/g, " ").trim();
  needle = norm(needle);
  const has = el => norm(el.textContent || "").includes(needle);
  for (const el of document.body.querySelectorAll("*")) {
    if (["SCRIPT", "STYLE", "NOSCRIPT"].includes(el.tagName) || !has(el)) continue;
    if (![...el.children].some(has)) return el.textContent;
  }
  return null;
})"""


def is_chrome(argv: list[str]) -> bool:
    """Whether `argv` starts Chrome or Chromium."""
    return bool(argv) and PurePosixPath(argv[0]).name in CHROME_PROGRAMS


class Browser:
    """A running Chromium and its DevTools connection; `session.browser` while it runs."""

    def __init__(self, process: subprocess.Popen[bytes], devtools: DevTools) -> None:
        self.process = process
        self.devtools = devtools

    @property
    def running(self) -> bool:
        """Whether the browser process is alive and its pipe open."""
        return self.process.poll() is None and not self.devtools.closed

    def tabs(self) -> list[dict[str, Any]]:
        """The open tabs' target infos (`targetId`, `url`, `title`), in the browser's order."""
        targets = self.devtools.call("Target.getTargets")["targetInfos"]
        return [target for target in targets if target["type"] == "page"]

    def evaluate(self, target_id: str, expression: str, timeout_s: float = 10.0) -> Any:
        """The JSON value of a JavaScript expression in a tab's page, or None where it throws."""
        session_id = self._session(target_id, timeout_s)
        result = self.devtools.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True},
            session_id=session_id, timeout_s=timeout_s)
        if "exceptionDetails" in result:
            return None
        return result.get("result", {}).get("value")

    def _session(self, target_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while target_id not in self.devtools.sessions:
            if time.monotonic() > deadline:
                raise DevToolsError(f"tab {target_id} was not attached within {timeout_s:g} s")
            time.sleep(0.05)
        return self.devtools.sessions[target_id]

    def wait_loaded(self, target_id: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
        """Wait until a tab's document has loaded (or failed to: an error page loads too)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                state = self.evaluate(target_id, "[document.readyState, location.href]", 5)
                if state and state[0] == "complete" and state[1] != "about:blank":
                    return
            except DevToolsError:
                pass
            time.sleep(0.2)
        logger.warning("tab %s did not finish loading within %g s", target_id, timeout_s)

    def open_tab(self, url: str) -> str:
        """Open `url` in a new foreground tab and wait for its load; returns its target id.

        The tab opens blank and is then sent to `url`: a tab created with its URL requests it
        before the client can route the request to the file cache."""
        target_id = self.devtools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session_id = self._session(target_id, LOAD_TIMEOUT_S)
        self.devtools.call("Page.navigate", {"url": url}, session_id=session_id,
                           timeout_s=LOAD_TIMEOUT_S)
        self.wait_loaded(target_id)
        return target_id

    def close_tab(self, target_id: str) -> None:
        """Close one tab, and wait until the browser no longer lists it (a closing tab lingers
        a moment, and would not answer)."""
        self.devtools.call("Target.closeTarget", {"targetId": target_id})
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while any(tab["targetId"] == target_id for tab in self.tabs()):
            if time.monotonic() > deadline:
                raise DevToolsError(f"tab {target_id} was still open {LOAD_TIMEOUT_S:g} s after "
                                    "it was closed")
            time.sleep(0.05)

    def active_tab(self) -> dict[str, Any] | None:
        """The tab whose page is showing, or None (no tab, or the window is minimized)."""
        for tab in self.tabs():
            try:
                if self.evaluate(tab["targetId"], "document.visibilityState", 5) == "visible":
                    return tab
            except DevToolsError:
                continue
        return None

    def close(self) -> None:
        """Close the browser as a user would, so that it writes its profile files, and wait
        for it to exit (killed after `CLOSE_TIMEOUT_S`)."""
        if self.running:
            try:
                self.devtools.call("Browser.close", timeout_s=5)
            except DevToolsError:
                pass
        try:
            self.process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # the session kills it at its close
            logger.warning("the browser did not exit within %g s of Browser.close",
                           CLOSE_TIMEOUT_S)
        self.devtools.close()


def cached_page(url: str) -> Path | None:
    """The cached file that answers a request for `url`. Chrome requests a bare host with a
    `/` path (`https://www.airbnb.com/`), which tasks name without it, so a URL is also looked
    up with its trailing `/` dropped or added."""
    other = url[:-1] if url.endswith("/") else url + "/"
    return file_cache.lookup(url) or file_cache.lookup(other)


def start_browser(session: DesktopSession, argv: list[str]) -> Browser:
    """Start Chrome or Chromium (`argv`, flags kept) in the sandbox with `CHROMIUM_FLAGS` and
    its DevTools pipe; returns once the browser answers on it, attached to its tabs."""
    command_read, command_write = os.pipe()
    message_read, message_write = os.pipe()
    try:
        process = session.launch([argv[0], *CHROMIUM_FLAGS, *argv[1:]],
                                 child_fds={COMMAND_FD: command_read, MESSAGE_FD: message_write})
    finally:
        os.close(command_read)
        os.close(message_write)
    devtools = DevTools(command_write, message_read, serve=cached_page)
    browser = Browser(process, devtools)
    try:
        devtools.call("Browser.getVersion", timeout_s=START_TIMEOUT_S)
        devtools.attach_to_tabs()
    except DevToolsError:
        devtools.close()
        raise
    session.browser = browser
    return browser


def _browser(session: DesktopSession, what: str) -> Browser:
    browser = session.browser
    if browser is None or not browser.running:
        raise DevToolsError(f"{what} needs a running browser; launch google-chrome (or "
                            "chromium) in a `launch` step before it")
    return browser


def open_tabs(session: DesktopSession, urls: list[str]) -> None:
    """OSWorld's `chrome_open_tabs`: each URL in a new tab, in order (the last one ends in
    front); after the first opens, the tab the browser started with is closed."""
    browser = _browser(session, "chrome_open_tabs")
    first_tabs = browser.tabs()
    for index, url in enumerate(urls):
        browser.open_tab(url)
        if index == 0 and first_tabs:
            browser.close_tab(first_tabs[0]["targetId"])


def close_tabs(session: DesktopSession, urls: list[str]) -> None:
    """OSWorld's `chrome_close_tabs`: for each URL, the first tab whose URL matches it under
    `compare_urls` is closed."""
    browser = _browser(session, "chrome_close_tabs")
    for url in urls:
        tab = next((tab for tab in browser.tabs() if compare_urls(tab["url"], url)), None)
        if tab is not None:
            browser.close_tab(tab["targetId"])


def _live_browser(context: EvalContext) -> Browser | None:
    browser = context.session.browser
    return browser if browser is not None and browser.running else None


def _active_tab(context: EvalContext) -> dict[str, Any] | None:
    browser = _live_browser(context)
    return browser.active_tab() if browser is not None else None


def get_active_url_from_accessTree(context: EvalContext, config: dict[str, Any]) -> str | None:  # noqa: N802
    """The active tab's URL as OSWorld reads it: `goto_prefix` (default `https://`) before the
    address bar's text; None with no active tab or an empty address bar."""
    tab = _active_tab(context)
    text = omnibox_text(tab["url"]) if tab is not None else ""
    return f"{config.get('goto_prefix', 'https://')}{text}" if text else None


def get_active_tab_info(context: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """The active tab's `title`, `url` and HTML `content`; None without one."""
    tab = _active_tab(context)
    browser = _live_browser(context)
    if tab is None or browser is None or not omnibox_text(tab["url"]):
        return None
    content = browser.evaluate(tab["targetId"], "document.documentElement.outerHTML")
    return {"title": tab["title"], "url": tab["url"], "content": content or ""}


def get_active_tab_html_parse(context: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """OSWorld's `active_tab_html_parse`: texts of the active tab's elements, each stored under
    the key the task names. `category` picks how elements are found: `class` (the n-th element
    of a class for each of `class_multiObject`'s ranks, the first for `class_singleObject`),
    `label` (the smallest element whose text holds the label, case-insensitive), `xpath` (the
    first match of each XPath) or `input` (the value of the first input an XPath finds). Texts
    are stripped; a key whose element is missing is left out. None without an active tab."""
    tab = _active_tab(context)
    browser = _live_browser(context)
    if tab is None or browser is None or not omnibox_text(tab["url"]):
        return None
    target = tab["targetId"]
    found: dict[str, str] = {}
    category = config["category"]
    if category == "class":
        def class_texts(name: str) -> list[str]:
            expression = (f"Array.from(document.querySelectorAll({json.dumps('.' + name)}),"
                          " el => el.textContent)")
            return [text.strip() for text in browser.evaluate(target, expression) or []]

        for name, ranks in config.get("class_multiObject", {}).items():
            texts = class_texts(name)
            for rank, key in ranks.items():
                if int(rank) < len(texts):
                    found[key] = texts[int(rank)]
        for name, key in config.get("class_singleObject", {}).items():
            if texts := class_texts(name):
                found[key] = texts[0]
    elif category == "label":
        for label, key in config.get("labelObject", {}).items():
            text = browser.evaluate(target, f"{_LABEL_JS}({json.dumps(label)})")
            if text and text.strip():
                found[key] = text.strip()
    elif category in ("xpath", "input"):
        attribute = "textContent" if category == "xpath" else "value"
        objects = config.get("xpathObject" if category == "xpath" else "inputObject", {})
        for xpath, key in objects.items():
            expression = (f"(n => n ? n.{attribute} : null)(document.evaluate("
                          f"{json.dumps(xpath)}, document, null, "
                          "XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue)")
            text = browser.evaluate(target, expression)
            if text is not None:
                found[key] = text.strip()
    else:
        raise ValueError(f"active_tab_html_parse category {category!r} is not one of class, "
                         "label, xpath, input")
    return found


def get_active_tab_url_parse(context: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """The active URL's query values of `parse_keys`, renamed by `replace`."""
    url = get_active_url_from_accessTree(context, config)
    return None if url is None else url_query_values(url, config["parse_keys"],
                                                      config.get("replace"))


def get_url_dashPart(context: EvalContext, config: dict[str, Any]) -> Any:  # noqa: N802
    """One `/`-separated part of the active URL (`chrome_metrics.url_dash_part`)."""
    url = get_active_url_from_accessTree(context, config)
    return None if url is None else url_dash_part(url, config)


def get_open_tabs_info(context: EvalContext, config: dict[str, Any]) -> list[dict[str, str]]:
    """Every open tab's `title` and `url` ([] without a browser)."""
    browser = _live_browser(context)
    if browser is None:
        return []
    return [{"title": tab["title"], "url": tab["url"]} for tab in browser.tabs()]


def get_page_info(context: EvalContext, config: dict[str, Any]) -> dict[str, str] | None:
    """`config["url"]` opened in a new tab: its `title`, `url` and HTML `content`."""
    browser = _live_browser(context)
    if browser is None:
        return None
    target = browser.open_tab(config["url"])
    tab = next((tab for tab in browser.tabs() if tab["targetId"] == target), None)
    content = browser.evaluate(target, "document.documentElement.outerHTML")
    return {"title": tab["title"] if tab else "", "url": tab["url"] if tab else config["url"],
            "content": content or ""}


def _profile_file(context: EvalContext, name: str) -> bytes | None:
    """A file of the browser's profile, after closing the browser so that it is written."""
    if (browser := context.session.browser) is not None:
        browser.close()
    return context.session.read_file(f"{PROFILE_DIR}/{name}")


def _preference_getter(name: str) -> Any:
    def getter(context: EvalContext, config: dict[str, Any]) -> Any:
        return read_preference(name, _profile_file(context, PREFERENCE_READERS[name][0]))

    getter.__name__ = f"get_{name}"
    getter.__doc__ = f"OSWorld's `{name}`, read from the profile's {PREFERENCE_READERS[name][0]}."
    return getter


def get_bookmarks(context: EvalContext, config: dict[str, Any]) -> Any:
    """The `roots` of the profile's Bookmarks file ([] when there is none)."""
    content = _profile_file(context, "Default/Bookmarks")
    return json.loads(content).get("roots", {}) if content else []


def _sqlite_rows(context: EvalContext, name: str, query: str) -> list[tuple[Any, ...]] | None:
    if (browser := context.session.browser) is not None:
        browser.close()
    copy = context.session.copy_out(f"{PROFILE_DIR}/{name}")
    if copy is None:
        return None
    try:
        with sqlite3.connect(copy) as connection:
            return connection.execute(query).fetchall()
    except sqlite3.Error as error:
        logger.error("could not read the profile's %s: %s", name, error)
        return None


def get_history(context: EvalContext, config: dict[str, Any]) -> list[tuple[Any, ...]] | None:
    """`(url, title, last_visit_time)` of every visited URL in the profile's History."""
    return _sqlite_rows(context, "Default/History", "SELECT url, title, last_visit_time FROM urls")


def get_cookie_data(context: EvalContext, config: dict[str, Any]) -> list[tuple[Any, ...]] | None:
    """Every row of the profile's `cookies` table (the host is the second column). Chromium
    keeps it in `Default/Network/Cookies` now; OSWorld's path, `Default/Cookies`, is read where
    that is missing."""
    rows = _sqlite_rows(context, "Default/Network/Cookies", "SELECT * FROM cookies")
    return rows if rows is not None else _sqlite_rows(context, "Default/Cookies",
                                                       "SELECT * FROM cookies")


def get_shortcuts_on_desktop(context: EvalContext, config: dict[str, Any]) -> dict[str, str]:
    """File name -> text of every `.desktop` file in `~/Desktop`."""
    names = context.session.list_dir(f"{VM_HOME}/Desktop") or []
    shortcuts = {}
    for name in names:
        if name.endswith(".desktop"):
            content = context.session.read_file(f"{VM_HOME}/Desktop/{name}")
            shortcuts[name] = (content or b"").decode("utf-8", errors="replace")
    return shortcuts


def get_rule_relativeTime(context: EvalContext, config: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
    """The task's `rules` with its relative dates made absolute (`chrome_metrics.relative_rules`)."""
    return relative_rules(config["rules"])


CHROME_GETTERS = {
    "active_url_from_accessTree": get_active_url_from_accessTree,
    "active_tab_info": get_active_tab_info,
    "active_tab_html_parse": get_active_tab_html_parse,
    "active_tab_url_parse": get_active_tab_url_parse,
    "url_dashPart": get_url_dashPart,
    "open_tabs_info": get_open_tabs_info,
    "page_info": get_page_info,
    "bookmarks": get_bookmarks,
    "history": get_history,
    "cookie_data": get_cookie_data,
    "rule_relativeTime": get_rule_relativeTime,
    "shortcuts_on_desktop": get_shortcuts_on_desktop,
    **{name: _preference_getter(name) for name in PREFERENCE_READERS},
}
