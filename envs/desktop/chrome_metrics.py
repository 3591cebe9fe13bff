"""OSWorld's metrics for Chrome tasks, and the pure parts of its Chrome getters.

Each function keeps OSWorld's semantics (`desktop_env/evaluators/metrics/chrome.py`,
`getters/chrome.py`, `getters/misc.py`), its quirks included, so that a task scores here what
it scores there:

- URLs compare after OSWorld's normalisation (`compare_urls`): a missing scheme reads as
  `http`, the scheme and host lower-cased, every `www.` dropped from the host, a lone `/` path
  dropped; query and fragment kept.
- The address bar (`omnibox_text`) shows a URL as Chrome does: no `http://` or `https://`, no
  leading `www.`, no lone `/` path; an empty bar for the new-tab page. OSWorld reads that text
  from the accessibility tree and puts the getter's `goto_prefix` (default `https://`) before it.
- Relative dates (`relative_rules`) resolve each phrase OSWorld knows against today and fill its
  placeholders (`{DoW}`, `{Month}`, `{DayD}`, `{Year}`, `{Month0D}`, `{month}`, `{MonthFull}`,
  `{Day0D}`), each once. Where OSWorld's month arithmetic would crash ("first monday four months
  later" in August) the month is counted correctly instead.
- Profile files (`Preferences`, `Local State`, `Bookmarks`) are read with OSWorld's fallbacks
  when a file is missing or unreadable: "false" for Do Not Track, "Google" for the others that
  read `Preferences` as text, the default font sizes, and so on (`PREFERENCE_READERS`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from itertools import product
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse, urlunparse

__all__ = [
    "PREFERENCE_READERS",
    "are_lists_equal",
    "check_enabled_experiments",
    "check_font_size",
    "check_history_deleted",
    "check_list",
    "compare_urls",
    "is_added_to_steam_cart",
    "is_cookie_deleted",
    "is_expected_active_tab",
    "is_expected_bookmarks",
    "is_expected_installed_extensions",
    "is_expected_tabs",
    "is_expected_url_pattern_match",
    "is_shortcut_on_desktop",
    "omnibox_text",
    "read_preference",
    "relative_rules",
    "url_dash_part",
    "url_query_values",
]

_NEW_TAB_PAGES = ("chrome://newtab/", "chrome://new-tab-page/", "about:blank")


def compare_urls(first: str | None, second: str | None) -> bool:
    """Whether two URLs are the same after OSWorld's normalisation (module docstring)."""
    if first is None or second is None:
        return first == second

    def normal(url: str) -> str:
        parsed = urlparse(url)
        return urlunparse(parsed._replace(
            scheme=(parsed.scheme or "http").lower(),
            netloc=parsed.netloc.lower().replace("www.", ""),
            path="" if parsed.path == "/" else parsed.path))

    return normal(first) == normal(second)


def are_lists_equal(first: list[Any], second: list[Any],
                    same: Callable[[Any, Any], bool]) -> bool:
    """OSWorld's list check: equal lengths, and each item of `first` matches some item of
    `second` (so duplicates are not counted)."""
    return len(first) == len(second) and all(any(same(a, b) for b in second) for a in first)


def omnibox_text(url: str) -> str:
    """What Chrome's address bar shows for `url` when it is not being edited."""
    if url in _NEW_TAB_PAGES or url.startswith(_NEW_TAB_PAGES[:2]):
        return ""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        return url
    host = parsed.netloc.removeprefix("www.")
    rest = urlunparse(parsed._replace(scheme="", netloc=""))
    return host + ("" if rest == "/" else rest)


def url_query_values(url: str, parse_keys: list[str],
                     replace: dict[str, str] | None = None) -> dict[str, str]:
    """OSWorld's `active_tab_url_parse`: the first value of each of `parse_keys` in the URL's
    query ("" when absent), with keys renamed by `replace` (a renamed key moves to the end)."""
    query = parse_qs(urlparse(url).query)
    values = {key: query.get(key, [""])[0] for key in parse_keys}
    for old, new in (replace or {}).items():
        values[new] = values.pop(old)
    return values


def url_dash_part(url: str, config: dict[str, Any]) -> str | dict[str, str] | None:
    """OSWorld's `url_dashPart`: the `partIndex`-th `/`-separated part of the URL, cut at `?`
    with `needDeleteId`, as a string or, with `returnType: json`, as `{key: part}`."""
    part = url.split("/")[config["partIndex"]]
    if config["needDeleteId"]:
        part = part.split("?")[0]
    if config["returnType"] == "string":
        return part
    if config["returnType"] == "json":
        return {config["key"]: part}
    return None


_SHORT_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_SHORT_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                 "Dec")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def _next_month_day(now: datetime, day: int) -> datetime:
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, day)


def _relative_day(phrase: str, now: datetime, start_phrase: str | None = None) -> datetime:
    """The day a phrase of OSWorld's tasks names, counted from `now` as OSWorld counts it."""
    weekday = now.weekday()
    if phrase == "tomorrow":
        return now + timedelta(days=1)
    if phrase == "this month":
        return now
    if phrase in ("5th next month", "10th next month", "11th next month"):
        return _next_month_day(now, int(phrase.split("th")[0]))
    if phrase == "next Monday":
        return now + timedelta(days=7 - weekday)
    if phrase == "this Saturday":
        return now + timedelta(days=5 - weekday)
    if phrase == "this Sunday":
        return now + timedelta(days=6 - weekday)
    if phrase == "next Friday":
        if weekday < 4 and start_phrase == "next Monday":
            return now + timedelta(days=4 - weekday + 7)
        return now + timedelta(days=4 - weekday if weekday < 4 else 6 - weekday + 5)
    if phrase == "first monday four months later":
        month_index = now.month - 1 + 4
        first = datetime(now.year + month_index // 12, month_index % 12 + 1, 1)
        return first + timedelta(days=(7 - first.weekday()) % 7)
    raise ValueError(f"unknown relative time {phrase!r}; OSWorld's tasks use tomorrow, this "
                     "month, next Monday, next Friday, this Saturday, this Sunday, 5th/10th/"
                     "11th next month and first monday four months later")


def _format_day(template: str, day: datetime) -> str:
    for placeholder, value in (("{DoW}", _SHORT_DAYS[day.weekday()]),
                               ("{Month}", _SHORT_MONTHS[day.month - 1]),
                               ("{DayD}", str(day.day)), ("{Year}", str(day.year)),
                               ("{Month0D}", f"{day.month:02d}"),
                               ("{month}", _MONTHS[day.month - 1].lower()),
                               ("{MonthFull}", _MONTHS[day.month - 1]),
                               ("{Day0D}", f"{day.day:02d}")):
        template = template.replace(placeholder, value, 1)
    return template


def relative_rules(rules: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """OSWorld's `rule_relativeTime`: `rules` with its expected `time` (or `from` and `to`)
    filled in from `rules["relativeTime"]`, counted from `now` (today by default)."""
    now = now or datetime.now()
    filled = copy.deepcopy(rules)
    relative, expected = filled["relativeTime"], filled["expected"]
    if "to" not in relative:
        expected["time"] = _format_day(expected["time"], _relative_day(relative["from"], now))
    else:
        expected["from"] = _format_day(expected["from"], _relative_day(relative["from"], now))
        expected["to"] = _format_day(expected["to"],
                                     _relative_day(relative["to"], now, relative["from"]))
    return filled


def is_expected_active_tab(active_tab: dict[str, Any] | str | None,
                           rule: dict[str, Any]) -> float:
    """1 if the active tab's URL (a tab dict's `url`, or the URL itself) is `rule["url"]` under
    `compare_urls`; a rule `type` other than `url` scores 0, as in OSWorld."""
    if not active_tab or rule["type"] != "url":
        return 0.0
    url = active_tab.get("url") if isinstance(active_tab, dict) else active_tab
    return float(compare_urls(rule["url"], url))


def is_expected_url_pattern_match(result: dict[str, Any] | str | None,
                                  rules: dict[str, Any]) -> float:
    """1 if every regex of `rules["expected"]` is found in the URL (a tab dict's `url`, or the
    URL itself)."""
    if not result:
        return 0.0
    url = result["url"] if isinstance(result, dict) else result
    return float(all(re.search(pattern, url) for pattern in rules["expected"]))


def is_expected_tabs(open_tabs: list[dict[str, Any]], rule: dict[str, Any]) -> float:
    """1 if the open tabs' URLs are `rule["urls"]` (`are_lists_equal` with `compare_urls`)."""
    if rule["type"] != "url":
        return 0.0
    actual = [tab["url"] for tab in open_tabs]
    return float(are_lists_equal(rule["urls"], actual, compare_urls))


def is_expected_bookmarks(bookmarks: dict[str, Any] | list[Any] | None,
                          rule: dict[str, Any]) -> float:
    """OSWorld's bookmark checks on the `roots` of Chrome's `Bookmarks` file: the bookmark
    bar's folder names (`bookmark_bar_folders_names`) or link URLs
    (`bookmark_bar_websites_urls`) as a set, or the links of its "Liked Authors" folder
    (`liked_authors_websites_urls`), where each expected entry may be a list of alternatives.

    Raises:
        TypeError: another rule type (OSWorld raises too).
    """
    if not bookmarks or not isinstance(bookmarks, dict):
        return 0.0  # no Bookmarks file: OSWorld's getter returns []
    children = bookmarks["bookmark_bar"]["children"]
    if rule["type"] == "bookmark_bar_folders_names":
        names = {child["name"] for child in children if child["type"] == "folder"}
        return float(names == set(rule["names"]))
    if rule["type"] == "bookmark_bar_websites_urls":
        urls = {child["url"] for child in children if child["type"] == "url"}
        return float(urls == set(rule["urls"]))
    if rule["type"] == "liked_authors_websites_urls":
        folder = next((child for child in children if child["type"] == "folder"
                       and child["name"] == "Liked Authors"), None)
        if folder is None:
            return 0.0
        liked = {child["url"] for child in folder["children"] if child["type"] == "url"}
        choices = [[url] if isinstance(url, str) else url for url in rule["urls"]]
        return float(any(set(combination) == liked for combination in product(*choices)))
    raise TypeError(f"bookmark rule type {rule['type']!r} is not supported; OSWorld's are "
                    "bookmark_bar_folders_names, bookmark_bar_websites_urls and "
                    "liked_authors_websites_urls")


def is_shortcut_on_desktop(shortcuts: dict[str, str], rule: dict[str, Any]) -> float:
    """1 if some `.desktop` file on the Desktop has the line `Name=<rule["name"]>`.

    Raises:
        TypeError: a rule type other than `name` (OSWorld raises too).
    """
    if rule["type"] != "name":
        raise TypeError(f"shortcut rule type {rule['type']!r} is not supported (name)")
    return float(any(f"Name={rule['name']}\n" in content for content in shortcuts.values()))


def is_added_to_steam_cart(page: dict[str, Any], rule: dict[str, Any]) -> float:
    """1 if the page's HTML holds every one of `rule["items"]`."""
    return float(all(item in page["content"] for item in rule["items"]))


def is_expected_installed_extensions(installed: list[str], expected: dict[str, Any]) -> float:
    """1 if every extension of `expected["expected"]` is installed."""
    return float(set(expected["expected"]) <= set(installed))


def check_list(result: str | None, rules: dict[str, list[str]]) -> float:
    """1 if each regex of `rules["expect"]` matches some line of the file at `result` and no
    regex of `rules["unexpect"]` matches any line."""
    if result is None:
        return 0.0
    expect = [re.compile(pattern) for pattern in rules.get("expect", [])]
    unexpect = [re.compile(pattern) for pattern in rules.get("unexpect", [])]
    lines = Path(result).read_text().splitlines(keepends=True)
    found = all(any(pattern.search(line) for line in lines) for pattern in expect)
    clean = not any(pattern.search(line) for pattern in unexpect for line in lines)
    return float(found and clean)


def check_font_size(font_size: dict[str, Any], rule: dict[str, Any]) -> float:
    """1 if the default font size is `rule["value"]` (`type: value`) or strictly between
    `min` and `max` (`type: range`).

    Raises:
        TypeError: another rule type (OSWorld raises too).
    """
    size = font_size["default_font_size"]
    if rule["type"] == "value":
        return float(size == rule["value"])
    if rule["type"] == "range":
        return float(rule["min"] < size < rule["max"])
    raise TypeError(f"font size rule type {rule['type']!r} is not supported (value, range)")


def check_enabled_experiments(enabled: list[str], rule: dict[str, Any]) -> float:
    """1 if the enabled chrome://flags experiments, without their `@<option>`, are exactly
    `rule["names"]`, in order.

    Raises:
        TypeError: a rule type other than `names` (OSWorld raises too).
    """
    if rule["type"] != "names":
        raise TypeError(f"experiments rule type {rule['type']!r} is not supported (names)")
    return float([name.split("@")[0] for name in enabled] == rule["names"])


def is_cookie_deleted(cookies: list[tuple[Any, ...]], rule: dict[str, Any]) -> float:
    """1 if no cookie's host (the second column of Chrome's `cookies` table) matches one of
    `rule["domains"]` under `compare_urls`.

    Raises:
        TypeError: a rule type other than `domains` (OSWorld raises too).
    """
    if rule["type"] != "domains":
        raise TypeError(f"cookie rule type {rule['type']!r} is not supported (domains)")
    hosts = [cookie[1] for cookie in cookies]
    return float(not any(compare_urls(domain, host) for domain in rule["domains"]
                         for host in hosts))


def check_history_deleted(history: list[tuple[Any, ...]], rule: dict[str, Any]) -> float:
    """1 if no visited URL (the first column of the history rows) holds one of
    `rule["keywords"]`.

    Raises:
        TypeError: a rule type other than `keywords` (OSWorld raises too).
    """
    if rule["type"] != "keywords":
        raise TypeError(f"history rule type {rule['type']!r} is not supported (keywords)")
    return float(not any(keyword in row[0] for keyword in rule["keywords"] for row in history))


def _enable_do_not_track(preferences: dict[str, Any]) -> str:
    return "true" if preferences.get("enable_do_not_track", {}) else "false"


def _enhanced_safe_browsing(preferences: dict[str, Any]) -> str:
    return "true" if preferences.get("safebrowsing", {}).get("enhanced", {}) else "false"


def _new_startup_page(preferences: dict[str, Any]) -> str:
    if "session" not in preferences:
        return "true"  # a fresh profile opens the new-tab page
    return "true" if preferences["session"].get("restore_on_startup", {}) == 5 else "false"


def _data_delete_automatically(preferences: dict[str, Any]) -> str:
    values = preferences["profile"].get("default_content_setting_values", None)
    return "true" if values is not None else "false"


def _default_search_engine(preferences: dict[str, Any]) -> str:
    return (preferences.get("default_search_provider_data", {}).get("template_url_data", {})
            .get("short_name", "Google"))


def _profile_name(preferences: dict[str, Any]) -> str | None:
    return preferences.get("profile", {}).get("name", None)


def _font_size(preferences: dict[str, Any]) -> dict[str, int]:
    return preferences.get("webkit", {}).get("webprefs", {
        "default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13})


def _enabled_experiments(local_state: dict[str, Any]) -> list[str]:
    return local_state.get("browser", {}).get("enabled_labs_experiments", [])


def _language(local_state: dict[str, Any]) -> str:
    return local_state.get("intl", {}).get("app_locale", "en-US")


def _unpacked_extension_paths(preferences: dict[str, Any]) -> list[str]:
    settings = preferences.get("extensions", {}).get("settings", {})
    return [extension["path"] for extension in settings.values()]


def _installed_extension_names(preferences: dict[str, Any]) -> list[str]:
    settings = preferences.get("extensions", {}).get("settings", {})
    return [extension["manifest"]["name"] for extension in settings.values()]


# getter -> (profile file, reader of its JSON, what OSWorld returns when the file is missing or
# the reader fails).
PREFERENCE_READERS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], Any]] = {
    "enable_do_not_track": ("Default/Preferences", _enable_do_not_track, "false"),
    "enable_enhanced_safety_browsing": ("Default/Preferences", _enhanced_safe_browsing,
                                        "Google"),
    "new_startup_page": ("Default/Preferences", _new_startup_page, "Google"),
    "data_delete_automacally": ("Default/Preferences", _data_delete_automatically, "Google"),
    "default_search_engine": ("Default/Preferences", _default_search_engine, "Google"),
    "profile_name": ("Default/Preferences", _profile_name, None),
    "chrome_font_size": ("Default/Preferences", _font_size,
                         {"default_fixed_font_size": 13, "default_font_size": 16}),
    "enabled_experiments": ("Local State", _enabled_experiments, []),
    "chrome_language": ("Local State", _language, "en-US"),
    "find_unpacked_extension_path": ("Default/Preferences", _unpacked_extension_paths,
                                     "Google"),
    "find_installed_extension_name": ("Default/Preferences", _installed_extension_names,
                                      "Google"),
}


def read_preference(getter: str, content: bytes | None) -> Any:
    """What OSWorld's profile getter `getter` returns for a profile file's `content` (None when
    the file does not exist)."""
    _, reader, fallback = PREFERENCE_READERS[getter]
    try:
        return reader(json.loads(content or b""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return copy.deepcopy(fallback)
