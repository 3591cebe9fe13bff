"""OSWorld's own Thunderbird tasks, unchanged, run end to end on the desktop with Debian's
Thunderbird.

Three task files (`tests/data/osworld_thunderbird/`, copied from OSWorld) download OSWorld's
profile tarball, unpack it into the home with tar and launch `/usr/bin/thunderbird`; they are
scored from the profile's files: prefs.js (030eeff7), an `ls -R` of its Local Folders
(2ad9387a), the IMAP account's msgFilterRules.dat (e1e75309). The tarball is written here
instead (`write_profile_tarball`): a minimal profile under OSWorld's names, with the IMAP account
the tasks name and Local Folders, and served from the offline file cache under the task's URL.

Thunderbird publishes no AT-SPI tree here, so the scripted solutions work as a user at the
desktop's tools would: wait until the window's title names the profile's account (so Thunderbird
runs on the unpacked profile, not a fresh one), quit Thunderbird (ctrl+q), open a terminal from
the desktop's menu and change the profile's files once Thunderbird has let go of the profile
(its lock on the profile's `.parentlock` is released). Each scores 1, and DONE at once scores 0.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from osworld_play import Step, play

from envs.desktop import DesktopEnv, file_cache
from envs.desktop.accessibility import accessibility_missing
from envs.desktop.display import REQUIRED_PROGRAMS
from envs.desktop.oracle import Await, call, command

TASKS_DIR = Path(__file__).parents[2] / "data" / "osworld_thunderbird"
# WAIT turns a step may take (a second each): Thunderbird takes seconds to quit on a busy machine.
MAX_WAITS = 30

_missing = [program for program in (*REQUIRED_PROGRAMS, "thunderbird", "xfce4-terminal")
            if not shutil.which(program)]
if no_tree := accessibility_missing():
    _missing.append(no_tree)
needs_thunderbird = pytest.mark.skipif(
    bool(_missing), reason=f"missing: {', '.join(_missing)} (`make desktop-apps` installs "
    "Thunderbird and the desktop's programs)")

PROFILE = "t5q2a5hp.default-release"  # the folder OSWorld's tasks read
# Thunderbird keeps one default profile per installation, under `Install` + a hash of its
# install folder; this is Debian's (and Ubuntu's) /usr/lib/thunderbird. A profiles.ini whose
# `Install` section names another hash makes Thunderbird ignore the unpacked profile and make
# a fresh `*.default-default` one beside it.
INSTALL_HASH = "FDC34C9F024745EB"
PREFS = {
    "mail.accountmanager.accounts": "account1,account2",
    "mail.accountmanager.defaultaccount": "account1",
    "mail.accountmanager.localfoldersserver": "server2",
    "mail.account.account1.identities": "id1",
    "mail.account.account1.server": "server1",
    "mail.account.account2.server": "server2",
    "mail.identity.id1.fullName": "Anonym Tester",
    "mail.identity.id1.useremail": "anonym-x2024@outlook.com",
    "mail.identity.id1.valid": True,
    "mail.server.server1.type": "imap",
    "mail.server.server1.hostname": "outlook.office365.com",
    "mail.server.server1.userName": "anonym-x2024@outlook.com",
    "mail.server.server1.name": "anonym-x2024@outlook.com",
    "mail.server.server1.port": 993,
    "mail.server.server1.socketType": 3,
    "mail.server.server1.directory-rel": "[ProfD]ImapMail/outlook.office365.com",
    # Offline there is no server to log in to: no password prompt at the start.
    "mail.server.server1.login_at_startup": False,
    "mail.server.server1.check_new_mail": False,
    "mail.server.server2.type": "none",
    "mail.server.server2.hostname": "Local Folders",
    "mail.server.server2.userName": "nobody",
    "mail.server.server2.name": "Local Folders",
    "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
    # Nothing to cover the main window: no default-client question, no rights bar, no start
    # page, no data-reporting notice; and it starts offline, as the sandbox is.
    "mail.shell.checkDefaultClient": False,
    "mail.rights.version": 1,
    "mailnews.start_page.enabled": False,
    "datareporting.policy.dataSubmissionPolicyBypassNotification": True,
    "offline.startup_state": 3,
}


def write_profile_tarball(path: Path) -> Path:
    """A `.thunderbird` folder as OSWorld's tarball holds it (unpacked into the home): the
    profile list naming `PROFILE` as this installation's default, and the profile's prefs.js."""
    files = {
        ".thunderbird/profiles.ini": (
            f"[Profile0]\nName=default-release\nIsRelative=1\nPath={PROFILE}\nDefault=1\n\n"
            f"[General]\nStartWithLastProfile=1\nVersion=2\n\n"
            f"[Install{INSTALL_HASH}]\nDefault={PROFILE}\nLocked=1\n"),
        ".thunderbird/installs.ini": f"[{INSTALL_HASH}]\nDefault={PROFILE}\nLocked=1\n",
        f".thunderbird/{PROFILE}/prefs.js": "".join(
            f"user_pref({json.dumps(key)}, {json.dumps(value)});\n" for key, value in PREFS.items()),
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size, member.mode = len(data), 0o644
            tar.addfile(member, io.BytesIO(data))
    return path


# A step of a scripted solution: a tool call, a node to click, a screen to wait for, or a
# function that reads the screen and returns the tool calls to make.



def load_task(task_id: str) -> dict:
    return json.loads(next((TASKS_DIR / "thunderbird").glob(f"{task_id}*.json")).read_text())


def click_terminal_in_root_menu(screen: str) -> list[str]:
    found = re.search(r'menu item "Terminal" at .* center \((\d+), (\d+)\)', screen)
    assert found, screen
    return [call("CLICK", x=int(found[1]), y=int(found[2]))]


# Quit Thunderbird on the unpacked profile, open a terminal, and wait there until Thunderbird
# has written its files and let go of the profile: it holds an fcntl lock on the profile's
# .parentlock while it runs (its `lock` link outlives it), which a blocking `lockf` waits for.
# `$P` is then the profile's folder.
QUIT_TO_A_TERMINAL: list[Step] = [
    Await(r'window "anonym-x2024@outlook\.com - Mozilla Thunderbird"'),
    call("HOTKEY", keys=["ctrl", "q"]),
    Await(r"Mozilla Thunderbird", present=False),
    call("CLICK", x=900, y=700, button="right"),
    click_terminal_in_root_menu,
    *command("P=~/.thunderbird/$(sed -n 's/^Path=//p' ~/.thunderbird/profiles.ini)"),
    *command("""python3 -c "import fcntl;fcntl.lockf(open('$P/.parentlock','a'),2)\""""),
]
LOCAL_FOLDERS = [*command('mkdir -p "$P/Mail/Local Folders"'),
                 *command('cd "$P/Mail/Local Folders"')]

# Thunderbird keeps a local folder as an mbox file and its `.msf` summary beside it (it builds
# an empty summary anew); a filter is a block of `key="value"` lines in the account's
# msgFilterRules.dat. The commands stay under the terminal's 80 columns.
SOLUTIONS: dict[str, list[Step]] = {
    # "Quote the original message with no indentation and no '>'": the identity's auto_quote.
    "030eeff7": [*QUIT_TO_A_TERMINAL, *command(
        """echo 'user_pref("mail.identity.id1.auto_quote", false);' >>"$P/prefs.js\"""")],
    "2ad9387a": [*QUIT_TO_A_TERMINAL, *LOCAL_FOLDERS,
                 *command("touch COMPANY COMPANY.msf UNIVERSITY UNIVERSITY.msf")],
    "e1e75309": [
        *QUIT_TO_A_TERMINAL, *LOCAL_FOLDERS, *command("touch Promotions Promotions.msf"),
        *command('F="$P/ImapMail/outlook.office365.com/msgFilterRules.dat"'),
        *command('mkdir -p "${F%/*}"'),
        *command("""printf '%s\\n' 'version="9"' 'logging="no"' >"$F\""""),
        *command("""printf '%s\\n' 'name="Promotions"' 'enabled="yes"' >>"$F\""""),
        *command("""printf '%s\\n' 'type="17"' 'action="Move to folder"' >>"$F\""""),
        *command("""echo 'actionValue="mailbox://nobody@Local%20Folders/Promotions"' >>"$F\""""),
        *command("""echo 'condition="AND (subject,contains,discount)"' >>"$F\"""")],
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The profile tarball in a private file cache, under the URL the tasks download."""
    folder = tmp_path_factory.mktemp("osworld-thunderbird")
    tarball = write_profile_tarball(folder / "thunderbird-profile.tar.gz")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENT_RL_HOME", str(folder / "agent-rl-home"))
        for task_id in SOLUTIONS:
            for url in file_cache.task_urls(load_task(task_id)):
                file_cache.add(url, tarball)
        yield


@pytest.fixture(scope="module")
def env(cache: None) -> Iterator[DesktopEnv]:
    desktop = DesktopEnv(max_turns=80)  # room for the steps' WAITs
    yield desktop
    desktop.close()




@pytest.mark.slow
@needs_thunderbird
@pytest.mark.parametrize("task_id", list(SOLUTIONS))
def test_osworld_thunderbird_task_scores_a_scripted_solution_1_and_a_no_op_0(
        env: DesktopEnv, task_id: str) -> None:
    task = load_task(task_id)
    reward, info = play(env, task, [], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (0.0, None)
    reward, info = play(env, task, SOLUTIONS[task_id], MAX_WAITS)
    assert (reward, info.get("evaluation_error")) == (1.0, None)
