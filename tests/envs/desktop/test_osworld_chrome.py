"""OSWorld's own Chrome tasks, unchanged, run end to end on the desktop with Debian's Chromium.

Three task files (`tests/data/osworld_chrome/`, copied from OSWorld) launch `google-chrome
--remote-debugging-port=1337` and socat, open their tabs with `chrome_open_tabs` and are scored
by Chrome getters: the open tabs (06fe7178), the active tab's URL read as OSWorld reads the
address bar (9f935cce), the profile's Bookmarks file (7a5a7856). The web pages they open are
small pages written here and put in the offline file cache under their URLs; the sandbox has no
network. A scripted solution plays each task through the env's own actions, waiting for what it
needs on the screen (the browser window's title, which names the loaded page); it scores 1, and
DONE at once scores 0.

The getters that ask the live browser (the active tab's URL, info and elements, the open tabs)
and the profile-file ones are also called directly, with options as OSWorld's tasks pass them,
on a cached page and an uncached one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from osworld_play import Step, play

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.display import REQUIRED_PROGRAMS, DesktopSession
from envs.desktop.evaluate import GETTERS, EvalContext
from envs.desktop.observe import Observer
from envs.desktop.oracle import Await, call
from envs.desktop.setup_steps import run_steps

TASKS_DIR = Path(__file__).parents[2] / "data" / "osworld_chrome"
MAX_WAITS = 15

_missing = [program for program in (*REQUIRED_PROGRAMS, "chromium", "socat")
            if not shutil.which(program)]
needs_chromium = pytest.mark.skipif(
    bool(_missing), reason=f"missing: {', '.join(_missing)} (`make desktop-apps` installs "
    "Chromium, socat and the desktop's programs)")

# URL -> (title, body) of the pages the tasks open or the solutions visit.
FORMS_URL = "https://www.justice.gov/forms?title=&field_component_target_id=431"
PAGES = {
    "https://www.lonelyplanet.com": ("Lonely Planet", "<h1>Travel guides</h1>"),
    "https://www.airbnb.com": ("Airbnb", "<h1>Stays</h1>"),
    "https://www.tripadvisor.com": ("Tripadvisor", "<h1>Reviews</h1>"),
    "https://www.justice.gov/": ("Justice", f'<a href="{FORMS_URL}">Civil Division forms</a>'),
    FORMS_URL: ("Civil Division Forms", "<h1>Forms</h1>"),
    "https://blog.eleuther.ai/rotary-embeddings/": ("Rotary Embeddings", "<h1>RoPE</h1>"),
    "https://jalammar.github.io/illustrated-transformer/": (
        "The Illustrated Transformer", "<h1>The Illustrated Transformer</h1>"),
}




def load_task(task_id: str) -> dict:
    return json.loads(next((TASKS_DIR / "chrome").glob(f"{task_id}*.json")).read_text())


SOLUTIONS: dict[str, list[Step]] = {
    # "Bring back the last tab I shut down": Chrome's reopen-closed-tab key.
    "06fe7178": [Await(r'window "Airbnb - Chromium"'),
                 call("HOTKEY", keys=["ctrl", "shift", "t"]),
                 Await(r'window "Tripadvisor - Chromium"')],
    # "Browse list of Civil Division forms": go to the forms page from the address bar.
    # (The address bar takes keys a moment after ctrl+l.)
    "9f935cce": [Await(r'window "Justice - Chromium"'), call("HOTKEY", keys=["ctrl", "l"]),
                 call("WAIT"), call("TYPING", text=FORMS_URL + "\n"),
                 Await(r'window "Civil Division Forms - Chromium"')],
    # "Save this webpage to the bookmarks bar": ctrl+d bookmarks the page in front, into
    # "Other bookmarks" in a new profile; in its bubble, tab to the folder list and pick the
    # entry above, "Bookmarks bar".
    "7a5a7856": [Await(r'window "The Illustrated Transformer - Chromium"'),
                 call("HOTKEY", keys=["ctrl", "d"]), call("WAIT"), call("PRESS", key="tab"),
                 call("PRESS", key="up"), call("WAIT"), call("PRESS", key="enter")],
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The pages in a private file cache, under their URLs."""
    folder = tmp_path_factory.mktemp("osworld-chrome")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        for index, (url, (title, body)) in enumerate(PAGES.items()):
            page = folder / f"page{index}.html"
            page.write_text(f"<html><head><title>{title}</title></head><body>{body}</body>"
                            "</html>")
            file_cache.add(url, page)
        yield


@pytest.fixture(scope="module")
def env(cache: None) -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(max_turns=40)
    yield desktop
    desktop.close()



@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("task_id", list(SOLUTIONS))
def test_osworld_chrome_task_scores_a_scripted_solution_1_and_a_no_op_0(
        env: DesktopEnv, task_id: str) -> None:
    task = load_task(task_id)
    reward, info = play(env, task, [], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (0.0, None)
    reward, info = play(env, task, SOLUTIONS[task_id], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (1.0, None)


SHOP_URL = "https://www.shop.example/search/jerseys-women?id=7&price_min=60&sort=low"
SHOP_PAGE = """<html><head><title>Shop</title></head><body>
<div class="price"> $61 </div><div class="price">$75</div><div class="brand">Nike</div>
<table><tr><td>Pick-up</td><td id="where"> Boston Logan </td></tr></table>
<p>Total seats: <b>7</b></p><input id="from" value=" Seattle "></body></html>"""


@pytest.fixture(scope="module")
def shop_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EvalContext]:
    """A desktop whose Chromium shows a cached shop page in front of a second tab."""
    folder = tmp_path_factory.mktemp("chrome-getters")
    (folder / "shop.html").write_text(SHOP_PAGE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        file_cache.add(SHOP_URL, folder / "shop.html")
        with DesktopSession() as session:
            observer = Observer(session.display)
            run_steps((session, observer), [
                {"type": "launch", "parameters": {"command": ["google-chrome",
                                                              "--remote-debugging-port=1337"]}},
                {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [
                    "https://www.uncached.example/", SHOP_URL]}}])
            yield EvalContext(session, observer, ended_by="DONE")
            observer.close()


@pytest.mark.slow
@needs_chromium
def test_the_browser_getters_read_the_active_tab_as_osworld_does(
        shop_browser: EvalContext) -> None:
    context = shop_browser
    www = {"goto_prefix": "https://www."}
    assert GETTERS["active_url_from_accessTree"](context, www) == SHOP_URL
    assert GETTERS["active_url_from_accessTree"](context, {}) == SHOP_URL.replace("www.", "")
    info = GETTERS["active_tab_info"](context, www)
    assert (info["title"], info["url"]) == ("Shop", SHOP_URL) and "Boston Logan" in info["content"]
    assert GETTERS["active_tab_url_parse"](context, www | {
        "parse_keys": ["price_min", "sort"], "replace": {"sort": "order"}}) == {
        "price_min": "60", "order": "low"}
    assert GETTERS["url_dashPart"](context, www | {
        "partIndex": -1, "needDeleteId": True, "returnType": "json", "key": "q"}) == {
        "q": "jerseys-women"}
    parse = GETTERS["active_tab_html_parse"]
    assert parse(context, www | {"category": "class",
                                 "class_multiObject": {"price": {"0": "low", "1": "high",
                                                                 "5": "missing"}},
                                 "class_singleObject": {"brand": "brand", "none": "x"}}) == {
        "low": "$61", "high": "$75", "brand": "Nike"}
    assert parse(context, {"category": "xpath",
                           "xpathObject": {"//*[@id='where']": "where", "//nav": "nav"}}) == {
        "where": "Boston Logan"}
    assert parse(context, {"category": "input", "inputObject": {"//*[@id='from']": "from"}}) == {
        "from": "Seattle"}
    assert parse(context, {"category": "label", "labelObject": {"total SEATS": "seats"}}) == {
        "seats": "Total seats: 7"}
    tabs = GETTERS["open_tabs_info"](context, {})
    assert sorted(tab["url"] for tab in tabs) == sorted([SHOP_URL, "https://www.uncached.example/"])
    # The profile's files are read after the browser closes, which writes them.
    assert GETTERS["enable_do_not_track"](context, {}) == "false"
    assert GETTERS["bookmarks"](context, {}) == []  # none made: no Bookmarks file, as OSWorld
    assert GETTERS["open_tabs_info"](context, {}) == []
