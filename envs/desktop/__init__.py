"""OSWorld-style desktop environment on a real X server: `agent_rl/Desktop-v0` (the shipped
task files) and `agent_rl/DesktopGen-v0` (generated instances).

| file | holds |
|---|---|
| `env.py` | `DesktopEnv`, the Gymnasium env |
| `display.py` | `DesktopSession`: Xvfb, window manager, bubblewrap sandbox per episode |
| `actions.py` | OSWorld's computer_13 actions as tools, run with xdotool |
| `observe.py` | the text accessibility tree and screenshots, read from the X server |
| `setup_steps.py` | OSWorld task `config` steps |
| `file_cache.py` | the offline cache that serves `download` steps, keyed by URL |
| `evaluate.py` | OSWorld evaluator getters and metrics |
| `tasks.py` | task files and splits in OSWorld's layout |
| `generate.py` | seeded instances of the shipped task kinds, split by their parameters |
| `oracle.py` | the scripted oracle that solves any generated instance from the screen text |
| `coverage.py` | which of OSWorld's tasks this env implements and can run here |
| `accessibility.py`, `a11y_reader.py` | the AT-SPI tree, read inside the sandbox |
| `apps.py` | which installed app plays each role (terminal, editor, file manager); what gets installed |
| `office.py` | LibreOffice: the documents it opens, its seeded per-episode profile |
| `install.py` | `make desktop-apps`: OSWorld's apps from Debian, pyautogui for the desktop's python3 |
| `recording.py` | episode recordings as HTML pages and contact sheets |
"""

from envs.desktop.env import DesktopEnv
from envs.desktop.tasks import load_desktop_tasks, load_task_file

__all__ = ["DesktopEnv", "load_desktop_tasks", "load_task_file"]
