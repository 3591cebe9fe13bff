"""OSWorld's Chrome metrics and the pure parts of its Chrome getters, against OSWorld's
semantics (`desktop_env/evaluators/metrics/chrome.py`, `getters/chrome.py`, `getters/misc.py`),
with the option values OSWorld's chrome tasks pass. No desktop starts."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from envs.desktop.chrome_metrics import (
    PREFERENCE_READERS,
    check_enabled_experiments,
    check_font_size,
    check_history_deleted,
    check_list,
    compare_urls,
    is_added_to_steam_cart,
    is_cookie_deleted,
    is_expected_active_tab,
    is_expected_bookmarks,
    is_expected_installed_extensions,
    is_expected_tabs,
    is_expected_url_pattern_match,
    is_shortcut_on_desktop,
    omnibox_text,
    read_preference,
    relative_rules,
    url_dash_part,
    url_query_values,
)
from envs.desktop.evaluate import GETTERS, METRICS


def test_urls_compare_without_www_trailing_slash_or_scheme_case() -> None:
    assert compare_urls("https://www.lonelyplanet.com", "https://lonelyplanet.com/")
    assert compare_urls("HTTPS://WWW.Example.com/a", "https://example.com/a")
    # Without `//` urlparse reads a host as a path, so OSWorld's "no scheme reads as http"
    # never makes "example.com" a host.
    assert not compare_urls("example.com", "http://example.com")
    assert compare_urls("//example.com/a", "http://example.com/a")
    assert not compare_urls("https://example.com/a", "https://example.com/a/")
    assert not compare_urls("https://example.com/?q=1", "https://example.com/?q=2")
    assert compare_urls(None, None) and not compare_urls(None, "https://example.com")


def test_the_address_bar_hides_the_scheme_www_and_a_lone_slash_as_chrome_does() -> None:
    assert omnibox_text("https://www.nfl.com/scores/2019/POST4") == "nfl.com/scores/2019/POST4"
    assert omnibox_text("https://www.justice.gov/") == "justice.gov"
    assert omnibox_text("http://example.com/a?b=1#c") == "example.com/a?b=1#c"
    assert omnibox_text("chrome://password-manager/passwords") == (
        "chrome://password-manager/passwords")
    assert omnibox_text("chrome://newtab/") == ""


def test_an_active_url_with_goto_prefix_matches_the_expected_tab() -> None:
    url = "https://www." + omnibox_text("https://www.nfl.com/scores/2019/POST4")
    rule = {"type": "url", "url": "https://www.nfl.com/scores/2019/POST4"}
    assert is_expected_active_tab(url, rule) == 1.0
    assert is_expected_active_tab({"url": url}, rule) == 1.0
    assert is_expected_active_tab("https://www.nfl.com/", rule) == 0.0
    assert is_expected_active_tab(None, rule) == 0.0
    assert is_expected_active_tab(url, {"type": "title", "url": url}) == 0.0
    # An empty goto_prefix leaves a chrome:// URL whole (task 12086550).
    passwords = "" + omnibox_text("chrome://password-manager/passwords")
    assert is_expected_active_tab(passwords, {"type": "url",
                                              "url": "chrome://password-manager/passwords"}) == 1


def test_url_patterns_must_all_be_found() -> None:
    rules = {"expected": ["AgeAppropriate:Kids", "search=spider[-%20]?man%20toys", "S=4"]}
    url = "https://www.kohls.com/search.jsp?search=spider-man%20toys&S=4&AgeAppropriate:Kids"
    assert is_expected_url_pattern_match(url, rules) == 1.0
    assert is_expected_url_pattern_match({"url": url}, rules) == 1.0
    assert is_expected_url_pattern_match(url.replace("S=4", "S=1"), rules) == 0.0
    assert is_expected_url_pattern_match(None, rules) == 0.0


def test_expected_tabs_compare_as_lists_of_urls() -> None:
    rule = {"type": "url", "urls": ["https://www.lonelyplanet.com", "https://www.airbnb.com",
                                    "https://www.tripadvisor.com"]}
    tabs = [{"url": "https://www.airbnb.com/"}, {"url": "https://www.lonelyplanet.com/"},
            {"url": "https://www.tripadvisor.com/"}]
    assert is_expected_tabs(tabs, rule) == 1.0
    assert is_expected_tabs(tabs[:2], rule) == 0.0
    assert is_expected_tabs([*tabs, {"url": "chrome://newtab/"}], rule) == 0.0


def _bookmarks(children: list[dict]) -> dict:
    return {"bookmark_bar": {"children": children}, "other": {"children": []}}


def test_bookmark_rules_read_the_bookmark_bar() -> None:
    folder = {"type": "folder", "name": "Favorites", "children": []}
    link = {"type": "url", "name": "T", "url": "https://jalammar.github.io/illustrated-transformer/"}
    assert is_expected_bookmarks(_bookmarks([folder, link]), {
        "type": "bookmark_bar_folders_names", "names": ["Favorites"]}) == 1.0
    assert is_expected_bookmarks(_bookmarks([link]), {
        "type": "bookmark_bar_folders_names", "names": ["Favorites"]}) == 0.0
    assert is_expected_bookmarks(_bookmarks([folder, link]), {
        "type": "bookmark_bar_websites_urls", "urls": [link["url"]]}) == 1.0
    assert is_expected_bookmarks([], {"type": "bookmark_bar_websites_urls", "urls": []}) == 0.0
    liked = {"type": "folder", "name": "Liked Authors", "children": [
        {"type": "url", "url": "https://a.org/"}, {"type": "url", "url": "https://b2.org/"}]}
    rule = {"type": "liked_authors_websites_urls",
            "urls": ["https://a.org/", ["https://b1.org/", "https://b2.org/"]]}
    assert is_expected_bookmarks(_bookmarks([liked]), rule) == 1.0
    assert is_expected_bookmarks(_bookmarks([folder]), rule) == 0.0
    with pytest.raises(TypeError):
        is_expected_bookmarks(_bookmarks([folder]), {"type": "other"})


def test_url_query_values_and_dash_parts_as_osworld_parses_them() -> None:
    url = ("https://www.cars.com/shopping/results/?list_price_max=50000&maximum_distance=50"
           "&zip=10001&fuel_slugs[]=electric")
    assert url_query_values(url, ["list_price_max", "maximum_distance", "zip", "fuel_slugs[]",
                                  "missing"]) == {
        "list_price_max": "50000", "maximum_distance": "50", "zip": "10001",
        "fuel_slugs[]": "electric", "missing": ""}
    renamed = url_query_values("https://x.com/?a=1&b=2", ["a", "b"], {"a": "from"})
    assert list(renamed.items()) == [("b", "2"), ("from", "1")]
    page = "https://www.drugs.com/sfx/tamiflu-side-effects.html?id=3"
    assert url_dash_part(page, {"partIndex": -1, "needDeleteId": True,
                                "returnType": "string"}) == "tamiflu-side-effects.html"
    assert url_dash_part(page, {"partIndex": -1, "needDeleteId": False, "returnType": "json",
                                "key": "part"}) == {"part": "tamiflu-side-effects.html?id=3"}


@pytest.mark.parametrize(("relative", "now", "expected"), [
    ({"from": "tomorrow"}, datetime(2026, 12, 31), {"time": "Fri Jan 1 2027"}),
    ({"from": "5th next month"}, datetime(2026, 12, 7), {"time": "Tue Jan 5 2027"}),
    ({"from": "10th next month"}, datetime(2026, 3, 7), {"time": "Fri Apr 10 2026"}),
    ({"from": "this month"}, datetime(2026, 12, 7), {"time": "Mon Dec 7 2026"}),
    ({"from": "next Monday"}, datetime(2026, 12, 7), {"time": "Mon Dec 14 2026"}),
    ({"from": "first monday four months later"}, datetime(2026, 12, 7),
     {"time": "Mon Apr 5 2027"}),
    ({"from": "first monday four months later"}, datetime(2026, 8, 7),
     {"time": "Mon Dec 7 2026"}),  # OSWorld crashes in August (month 0)
    ({"from": "this Saturday", "to": "this Sunday"}, datetime(2026, 12, 7),
     {"from": "Sat Dec 12 2026", "to": "Sun Dec 13 2026"}),
    ({"from": "next Monday", "to": "next Friday"}, datetime(2026, 12, 8),  # a Tuesday
     {"from": "Mon Dec 14 2026", "to": "Fri Dec 18 2026"}),
    ({"from": "next Monday", "to": "next Friday"}, datetime(2026, 12, 11),  # a Friday
     {"from": "Mon Dec 14 2026", "to": "Fri Dec 18 2026"}),
    ({"from": "10th next month", "to": "11th next month"}, datetime(2026, 12, 7),
     {"from": "Sun Jan 10 2027", "to": "Mon Jan 11 2027"}),
])
def test_relative_times_resolve_as_osworld_counts_them(relative: dict, now: datetime,
                                                       expected: dict) -> None:
    template = "{DoW} {Month} {DayD} {Year}"
    rules = {"relativeTime": relative, "expected": {key: template for key in expected}}
    filled = relative_rules(rules, now)
    assert filled["expected"] == expected
    assert rules["expected"] == {key: template for key in expected}  # the task is untouched


def test_every_time_placeholder_is_filled_once() -> None:
    rules = {"relativeTime": {"from": "this month"},
             "expected": {"time": "{Year}-{Month0D}-{Day0D} {month} {MonthFull} {Year}"}}
    assert relative_rules(rules, datetime(2026, 3, 4))["expected"]["time"] == (
        "2026-03-04 march March {Year}")


def test_profile_getters_read_preferences_with_osworld_fallbacks() -> None:
    preferences = {"enable_do_not_track": True, "safebrowsing": {"enhanced": True},
                   "session": {"restore_on_startup": 5},
                   "profile": {"name": "Thomas", "default_content_setting_values": {}},
                   "default_search_provider_data": {"template_url_data": {"short_name": "Bing"}},
                   "webkit": {"webprefs": {"default_font_size": 20}},
                   "extensions": {"settings": {"abc": {"path": "/home/user/Desktop/ext",
                                                       "manifest": {"name": "Hello"}}}}}
    content = json.dumps(preferences).encode()
    expected = {"enable_do_not_track": "true", "enable_enhanced_safety_browsing": "true",
                "new_startup_page": "true", "data_delete_automacally": "true",
                "default_search_engine": "Bing", "profile_name": "Thomas",
                "chrome_font_size": {"default_font_size": 20},
                "find_unpacked_extension_path": ["/home/user/Desktop/ext"],
                "find_installed_extension_name": ["Hello"]}
    for getter, value in expected.items():
        assert read_preference(getter, content) == value, getter
    fresh = json.dumps({"profile": {}}).encode()
    assert read_preference("enable_do_not_track", fresh) == "false"
    assert read_preference("new_startup_page", fresh) == "true"  # no session: a fresh start
    assert read_preference("new_startup_page", json.dumps(
        {"session": {"restore_on_startup": 4}}).encode()) == "false"
    assert read_preference("data_delete_automacally", fresh) == "false"
    assert read_preference("default_search_engine", fresh) == "Google"
    assert read_preference("chrome_font_size", fresh)["default_font_size"] == 16
    # A missing file: OSWorld's fallbacks, quirks included.
    assert read_preference("enable_do_not_track", None) == "false"
    assert read_preference("enable_enhanced_safety_browsing", None) == "Google"
    assert read_preference("profile_name", None) is None
    assert read_preference("chrome_font_size", None) == {"default_fixed_font_size": 13,
                                                         "default_font_size": 16}
    local_state = json.dumps({"browser": {"enabled_labs_experiments": ["a@1", "b"]},
                              "intl": {"app_locale": "ko"}}).encode()
    assert read_preference("enabled_experiments", local_state) == ["a@1", "b"]
    assert read_preference("chrome_language", local_state) == "ko"
    assert read_preference("chrome_language", None) == "en-US"
    assert PREFERENCE_READERS["enabled_experiments"][0] == "Local State"


def test_settings_metrics() -> None:
    assert check_font_size({"default_font_size": 20}, {"type": "value", "value": 20}) == 1.0
    assert check_font_size({"default_font_size": 16}, {"type": "range", "min": 16,
                                                       "max": 99}) == 0.0
    assert check_enabled_experiments(["a@1", "b"], {"type": "names", "names": ["a", "b"]}) == 1
    assert check_enabled_experiments(["b", "a"], {"type": "names", "names": ["a", "b"]}) == 0
    assert is_expected_installed_extensions(["x", "y"], {"expected": ["x"]}) == 1.0
    assert is_cookie_deleted([(0, ".amazon.com")], {"type": "domains",
                                                    "domains": [".amazon.com"]}) == 0.0
    assert is_cookie_deleted([(0, ".bbc.com")], {"type": "domains",
                                                 "domains": [".amazon.com"]}) == 1.0
    assert check_history_deleted([("https://youtube.com/x",)], {"type": "keywords",
                                                                "keywords": ["youtube"]}) == 0
    assert is_shortcut_on_desktop({"a.desktop": "[Desktop Entry]\nName=Gmail\n"},
                                  {"type": "name", "name": "Gmail"}) == 1.0
    assert is_added_to_steam_cart({"content": "<li>DLC 1</li><li>DLC 2</li>"},
                                  {"items": ["DLC 1", "DLC 2"]}) == 1.0


def test_check_list_matches_regexes_line_by_line(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("alpha 1\nbeta 2\n")
    assert check_list(str(listing), {"expect": ["^alpha", "beta \\d"]}) == 1.0
    assert check_list(str(listing), {"expect": ["gamma"]}) == 0.0
    assert check_list(str(listing), {"expect": ["alpha"], "unexpect": ["2$"]}) == 0.0
    assert check_list(None, {"expect": []}) == 0.0


def test_every_chrome_getter_and_metric_is_registered() -> None:
    for name in ("active_url_from_accessTree", "active_tab_info", "active_tab_html_parse",
                 "active_tab_url_parse", "url_dashPart", "open_tabs_info", "bookmarks",
                 "rule_relativeTime", "page_info", "history", "cookie_data",
                 "shortcuts_on_desktop", *PREFERENCE_READERS):
        assert name in GETTERS, name
    for name in ("is_expected_active_tab", "is_expected_url_pattern_match", "is_expected_tabs",
                 "is_expected_bookmarks", "check_list", "check_font_size",
                 "check_enabled_experiments", "is_cookie_deleted", "check_history_deleted",
                 "is_shortcut_on_desktop", "is_added_to_steam_cart"):
        assert name in METRICS, name
