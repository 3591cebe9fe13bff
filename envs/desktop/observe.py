"""What the agent sees: an accessibility-tree-like text listing of the screen, and a screenshot.

Both come straight from the X server (the same data `xwininfo -tree` and `xprop` print), read
through one python-xlib connection so that a step costs a few milliseconds, not a subprocess per
window. Top-level app windows come from the window manager's `_NET_CLIENT_LIST_STACKING`; their
widgets are the app's mapped child windows. X stores no names for most widgets, so a widget is
listed by its position and size; windows and dialogs carry their titles and WM_CLASS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PIL import Image
from Xlib import X, Xatom, error
from Xlib.display import Display
from Xlib.xobject.drawable import Window

from envs.desktop.accessibility import render_a11y

if TYPE_CHECKING:
    from envs.desktop.display import DesktopSession

__all__ = ["POSITION_FROM_MOTION", "Node", "Observer", "render_tree", "screen_text"]

_ROLE_OF_TYPE = {
    "_NET_WM_WINDOW_TYPE_NORMAL": "window",
    "_NET_WM_WINDOW_TYPE_DIALOG": "dialog",
    "_NET_WM_WINDOW_TYPE_MENU": "menu",
    "_NET_WM_WINDOW_TYPE_POPUP_MENU": "menu",
    "_NET_WM_WINDOW_TYPE_DROPDOWN_MENU": "menu",
    "_NET_WM_WINDOW_TYPE_TOOLTIP": "tooltip",
    "_NET_WM_WINDOW_TYPE_UTILITY": "window",
    "_NET_WM_WINDOW_TYPE_DOCK": "panel",
}
_MIN_WIDGET_PIXELS = 6
# Window classes of apps that learn where the window manager put their windows only from the
# pointer's motion. LibreOffice does (JWM frames and maximizes its window without the configure
# event it would read), and until the pointer moves it places every widget of its accessibility
# tree off by the frame's title bar, so a click placed from the screen text would miss.
POSITION_FROM_MOTION = ("libreoffice-",)


@dataclass
class Node:
    """One window or widget: its role, name, app class and on-screen box (root coordinates)."""

    role: str
    name: str
    app: str
    x: int
    y: int
    width: int
    height: int
    focused: bool = False
    states: list[str] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.width // 2, self.y + self.height // 2


class Observer:
    """Reads the screen of one X display. Open once per episode, `close()` at its end."""

    def __init__(self, display_name: str, max_widgets_per_window: int = 24, max_depth: int = 4,
                 root_menu_labels: tuple[str, ...] = ()):
        self.display = Display(display_name)
        self.root_menu_labels = root_menu_labels
        self.root = self.display.screen().root
        self.max_widgets_per_window = max_widgets_per_window
        self.max_depth = max_depth
        self._atoms: dict[str, int] = {}

    def _atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = self.display.intern_atom(name)
        return self._atoms[name]

    def _atom_name(self, atom: int) -> str:
        return self.display.get_atom_name(atom)

    def close(self) -> None:
        self.display.close()

    def client_windows(self) -> list[Window]:
        """Managed top-level windows, bottom to top of the stacking order.

        The order comes from the root's children (each client sits in a window manager frame),
        which X keeps bottom to top; JWM's `_NET_CLIENT_LIST_STACKING` runs the other way.
        """
        prop = self.root.get_full_property(self._atom("_NET_CLIENT_LIST"), Xatom.WINDOW)
        if prop is None:
            return []
        frame_order = {window.id: index for index, window in enumerate(self.root.query_tree().children)}
        clients = []
        for window_id in prop.value:
            window = self.display.create_resource_object("window", window_id)
            try:
                clients.append((frame_order.get(self._frame_of(window), -1), window))
            except error.BadWindow:
                continue
        return [window for _, window in sorted(clients, key=lambda pair: pair[0])]

    def _frame_of(self, window: Window) -> int:
        """The id of the root child that holds `window` (its frame, or itself)."""
        while True:
            parent = window.query_tree().parent
            if parent.id == self.root.id or parent.id == X.NONE:
                return window.id
            window = parent

    def accessibility_bus_up(self) -> bool:
        """Whether an app has started the accessibility bus (it publishes the bus on the root
        window): before that no app has an AT-SPI tree to read."""
        return self.root.get_full_property(self._atom("AT_SPI_BUS"), X.AnyPropertyType) is not None

    def active_window_id(self) -> int:
        prop = self.root.get_full_property(self._atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW)
        return int(prop.value[0]) if prop is not None and len(prop.value) else 0

    def title(self, window: Window) -> str:
        prop = window.get_full_property(self._atom("_NET_WM_NAME"), self._atom("UTF8_STRING"))
        if prop is not None and prop.value:
            value = prop.value
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        name = window.get_wm_name()
        if isinstance(name, bytes):
            return name.decode("latin-1")
        return name or ""

    def _app(self, window: Window) -> str:
        wm_class = window.get_wm_class()
        return wm_class[1] if wm_class else ""

    def _role(self, window: Window) -> str:
        prop = window.get_full_property(self._atom("_NET_WM_WINDOW_TYPE"), Xatom.ATOM)
        if prop is None or not len(prop.value):
            return "dialog" if window.get_wm_transient_for() else "window"
        return _ROLE_OF_TYPE.get(self._atom_name(prop.value[0]), "window")

    def _states(self, window: Window) -> list[str]:
        prop = window.get_full_property(self._atom("_NET_WM_STATE"), Xatom.ATOM)
        if prop is None:
            return []
        names = [self._atom_name(atom).removeprefix("_NET_WM_STATE_").lower() for atom in prop.value]
        return sorted(set(names) & {"maximized_vert", "maximized_horz", "hidden", "fullscreen"})

    def _box(self, window: Window) -> tuple[int, int, int, int]:
        geometry = window.get_geometry()
        origin = self.root.translate_coords(window, 0, 0)
        return origin.x, origin.y, geometry.width, geometry.height

    def tree(self) -> list[Node]:
        """The managed windows, top of the stack first, each with its visible widgets."""
        active = self.active_window_id()
        clients = self.client_windows()
        nodes = []
        for window in reversed(clients):
            try:
                attributes = window.get_attributes()
                states = self._states(window)
                if attributes.map_state != X.IsViewable and "hidden" not in states:
                    continue
                x, y, width, height = self._box(window)
                node = Node(
                    role=self._role(window),
                    name=self.title(window),
                    app=self._app(window),
                    x=x,
                    y=y,
                    width=width,
                    height=height,
                    focused=window.id == active,
                    states=states,
                )
                if "hidden" not in states:
                    frame = self.display.create_resource_object("window", self._frame_of(window))
                    node.children = _title_bar_buttons(node, self._box(frame)) + self._widgets(window)
                nodes.append(node)
            except error.BadWindow:
                continue  # the window closed while we were reading it
        return self._menus(clients) + nodes

    def window_ids(self) -> tuple[set[int], set[int]]:
        """Ids of the managed client windows and of the open pop-up menus."""
        clients = self.client_windows()
        return {window.id for window in clients}, {window.id for window, _ in self._popups(clients)}

    def _popups(self, clients: list[Window]) -> list[tuple[Window, tuple[int, int, int, int]]]:
        """Mapped top-level windows that hold no managed client (an app's override-redirect
        pop-ups, the window manager's own menus), top first, with their boxes: the window
        manager's client list leaves them out."""
        frames = set()
        for client in clients:
            try:
                frames.add(self._frame_of(client))
            except error.BadWindow:
                continue
        popups = []
        for window in reversed(self.root.query_tree().children):
            try:
                if window.id in frames or window.get_attributes().map_state != X.IsViewable:
                    continue
                box = self._box(window)
            except error.BadWindow:
                continue
            if box[2] >= _MIN_WIDGET_PIXELS and box[3] >= _MIN_WIDGET_PIXELS:
                popups.append((window, box))
        return popups

    def _menus(self, clients: list[Window]) -> list[Node]:
        """Open pop-up menus as nodes.

        The window manager's root menu (a right-click on the desktop) is drawn by JWM, so X
        holds no item windows; its items are the labels the env configured, in order, each an
        equal share of the menu's height (JWM draws them so, with no separators configured).
        """
        menus = []
        for window, (x, y, width, height) in self._popups(clients):
            try:
                app, name = self._app(window), self.title(window)
            except error.BadWindow:
                continue
            node = Node("menu", name, app, x, y, width, height)
            labels = self.root_menu_labels
            if not app and labels:  # JWM's own menu window has no WM_CLASS
                node.name = "desktop menu"
                step = height / len(labels)
                node.children = [Node("menu item", label, "", x, round(y + i * step), width,
                                      round(step)) for i, label in enumerate(labels)]
            menus.append(node)
        return menus

    def _widgets(self, window: Window) -> list[Node]:
        widgets: list[Node] = []
        self._collect_widgets(window, depth=1, out=widgets)
        return widgets[: self.max_widgets_per_window]

    def _collect_widgets(self, window: Window, depth: int, out: list[Node]) -> None:
        if depth > self.max_depth or len(out) >= self.max_widgets_per_window:
            return
        for child in window.query_tree().children:
            attributes = child.get_attributes()
            if attributes.map_state != X.IsViewable:
                continue
            x, y, width, height = self._box(child)
            if width >= _MIN_WIDGET_PIXELS and height >= _MIN_WIDGET_PIXELS:
                name = self.title(child)
                out.append(Node("widget", name, self._app(child), x, y, width, height))
            self._collect_widgets(child, depth + 1, out)

    def screenshot(self) -> Image.Image:
        """The whole screen as an RGB image."""
        geometry = self.root.get_geometry()
        raw = self.root.get_image(0, 0, geometry.width, geometry.height, X.ZPixmap, 0xFFFFFFFF)
        return Image.frombytes("RGB", (geometry.width, geometry.height), raw.data, "raw", "BGRX")

    def pointer(self) -> tuple[int, int]:
        reply = self.root.query_pointer()
        return reply.root_x, reply.root_y

    def nudge_pointer(self) -> None:
        """Move the pointer one pixel and back, leaving it where it was: the motion tells
        apps of `POSITION_FROM_MOTION` where their windows are."""
        x, y = self.pointer()
        width = self.root.get_geometry().width
        self.root.warp_pointer(x + 1 if x + 1 < width else x - 1, y)
        self.root.warp_pointer(x, y)
        self.display.sync()


def _title_bar_buttons(client: Node, frame: tuple[int, int, int, int]) -> list[Node]:
    """JWM's minimize / maximize / close buttons, which it draws rather than makes windows.

    Their places follow JWM's default layout: 24-pixel buttons at the right end of the title
    bar, which spans from the frame's top to the client's top.
    """
    frame_x, frame_y, frame_width, _ = frame
    title_height = client.y - frame_y
    border = client.x - frame_x
    right = frame_x + frame_width - border
    if title_height < 10 or right - 72 < client.x + 16:
        return []
    buttons = []
    for offset, name in ((72, "minimize"), (48, "maximize"), (24, "close")):
        buttons.append(Node("button", name, client.app, right - offset, frame_y + 2, 24, title_height - 4))
    return buttons


def render_tree(nodes: list[Node], screen: tuple[int, int], pointer: tuple[int, int]) -> str:
    """The tree as indented text lines a model can read: role, name, app, box, state."""
    lines = [
        f"screen {screen[0]}x{screen[1]}, mouse at ({pointer[0]}, {pointer[1]}), "
        f"{len(nodes)} window(s), top of the stack first:"
    ]
    if not nodes:
        lines.append("  (no windows open; right-click the desktop for the app menu)")
    for index, node in enumerate(nodes, start=1):
        flags = (["focused"] if node.focused else []) + node.states
        flag_text = f" [{', '.join(flags)}]" if flags else ""
        lines.append(
            f'  [{index}] {node.role} "{node.name}" app={node.app or "?"} '
            f"at ({node.x}, {node.y}) size {node.width}x{node.height}{flag_text}"
        )
        for child_index, child in enumerate(node.children, start=1):
            label = f' "{child.name}"' if child.name else ""
            center_x, center_y = child.center
            lines.append(
                f"      [{index}.{child_index}] {child.role}{label} at ({child.x}, {child.y}) "
                f"size {child.width}x{child.height} center ({center_x}, {center_y})"
            )
    return "\n".join(lines)


def screen_text(observer: Observer, session: DesktopSession) -> str:
    """What the agent reads (and the `accessibility_tree` getter returns): the X window
    listing, then the apps' AT-SPI tree once an app has published one (the pointer nudged
    first where an app of `POSITION_FROM_MOTION` shows a window)."""
    nodes = observer.tree()
    text = render_tree(nodes, (session.width, session.height), observer.pointer())
    if session.accessibility and observer.accessibility_bus_up():
        if any(node.app.startswith(POSITION_FROM_MOTION) for node in nodes):
            observer.nudge_pointer()
        text += "\n" + render_a11y(session.read_accessibility())
    return text
