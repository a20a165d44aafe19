"""The full-screen terminal client (Textual): the wire, an order ticket, orders, fills, books and tape.

The tap calls ``Client.on_record`` on its own thread; decoded messages wait in a queue that the app
drains on its own loop every ``DRAIN_S`` (a busy wire costs one screen update per tick, not one per
message). The prompt takes the same commands as ``--plain`` (services/client/commands.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Button, DataTable, Footer, Input, RichLog, Select, Static
from textual.widgets.data_table import ColumnKey

from services.client.commands import TIF_NAMES, CommandError, parse
from services.client.core import QUIT, SIDE_NAMES, Client, Decoded
from services.client.session import LOGGED_ON
from shared.schema import AT_CLOSE, AT_OPEN, BUY, DAY, FOK, GTC, IOC, SELL

DRAIN_S = 0.05
VIEW_S = 0.25
WIRE_LINES = 20000  # rows (a message wraps onto several)
BOOK_DEPTH = 5
TAPE_LINES = 8
# The ticket's TimeInForce (59) choices and the words the prompt takes for them (commands.py).
TICKET_TIFS = {DAY: "day", GTC: "gtc", IOC: "ioc", FOK: "fok", AT_OPEN: "opg", AT_CLOSE: "atc"}


SESSION = Style(dim=True)
WITHHELD = Style(color="yellow", strike=True)
PROBLEM = Style(color="red")
SENT = Style(color="cyan", bold=True)
RECEIVED = Style(color="green", bold=True)


def style_of(d: Decoded) -> Style:
    """Session messages dimmed, withheld ones struck through, problems in red."""
    if d.rec.withheld:
        return WITHHELD
    if d.parsed.problems:
        return PROBLEM
    if d.parsed.category == "session":
        return SESSION
    return SENT if d.rec.source == "client" else RECEIVED


INDENT = "        "


def wrap(text: str, width: int) -> list[str]:
    """``text`` cut at spaces into rows of at most ``width``, the rows after the first indented.

    A few string searches per row: textwrap.wrap took ~70 us a message here."""
    rows: list[str] = []
    start, end = 0, len(text)
    room = width
    while end - start > room:
        cut = text.rfind(" ", start, start + room + 1)
        if cut <= start:
            cut = start + room
        rows.append(text[start:cut] if not rows else INDENT + text[start:cut])
        start = cut + 1 if cut < end and text[cut] == " " else cut
        room = width - len(INDENT)
    if start < end or not rows:
        rows.append(text[start:] if not rows else INDENT + text[start:])
    return rows


class WireView(ScrollView):
    """The wire: one decoded message per entry, wrapped at the width it arrived at, kept to ``max_lines``.

    Only the rows on screen are rendered (Textual's line API), so a message costs a wrap and an append,
    whatever the rate: a RichLog renders every line it is given (~0.7 ms each here), which at 1,000
    messages a second fell seconds behind."""

    DEFAULT_CSS = "WireView { overflow-x: hidden; }"

    def __init__(self, max_lines: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: deque[tuple[str, Style]] = deque(maxlen=max_lines)
        # Following what arrives, until the visitor scrolls up (and again once they are back at the
        # end). Not "at the end now": a view made smaller than its rows (the layout settling, a
        # resize) is not at its end, and was never followed again.
        self.following = True

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            self.following = True
        elif new_value < old_value:
            self.following = False

    def add(self, items: list[tuple[str, Style]]) -> None:
        # Room for the vertical scrollbar even before it shows: rows wrapped before it came stay whole.
        width = max(20, (self.scrollable_content_region.width or 120) - self.styles.scrollbar_size_vertical)
        for text, style in items:
            if len(text) <= width:
                self.rows.append((text, style))
            else:
                self.rows.extend((part, style) for part in wrap(text, width))
        self.virtual_size = Size(width, len(self.rows))
        if self.following:
            self.scroll_end(animate=False, x_axis=False)  # after the refresh: the new size counts
        self.refresh()

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self.rows):
            return Strip.blank(width, base)
        text, style = self.rows[index]
        return Strip([Segment(text, base + style)]).crop_extend(0, width, base)

    def text(self) -> str:
        """Everything kept, the wrapped rows joined again (spaces collapsed): for tests."""
        return " ".join(" ".join(t for t, _ in self.rows).split())


class OrdersTable(DataTable[str]):
    """Open orders; keys act on the selected one."""

    BINDINGS = [
        Binding("c", "app.cancel_selected", "cancel"),
        Binding("s", "app.status_selected", "status"),
        Binding("r", "app.replace_selected", "replace"),
    ]


class ClientApp(App[int]):
    """The terminal client on one logged-on (or logging-on) ``Client``. Returns the exit code."""

    TITLE = "FIX Lab client"
    CSS = """
    #left { width: 3fr; }
    #right { width: 2fr; }
    #status { height: 1; background: $boost; }
    #wire { height: 3fr; border: round $primary; }
    #out { height: 1fr; border: round $secondary; }
    #ticket { height: 3; }
    #ticket Select { width: 12; }
    #ticket Input { width: 1fr; }
    #ticket Button { min-width: 6; }
    #orders { height: 1fr; border: round $primary; }
    #fills { height: 8; border: round $primary; }
    #market { height: 1fr; border: round $primary; }
    #prompt { dock: bottom; }
    """
    BINDINGS = [
        Binding("ctrl+q", "quit_client", "quit"),
        Binding("f2", "drop", "drop next"),
        Binding("f3", "silent", "go silent"),
        Binding("f4", "talk", "talk again"),
        Binding("f5", "seq", "seq"),
    ]

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client
        self.pending: deque[Decoded] = deque()
        self.shown = 0  # wire messages written to the screen
        self.lag_ns_max = 0  # the most a message waited between the tap and the screen
        self.drains: deque[tuple[int, int]] = deque(maxlen=100_000)  # (backlog, its oldest's wait ns)
        self.max_backlog = 0
        self._version = -1
        self._status = ""
        self._notes: deque[tuple[str, str]] = deque()
        self._shown_text: dict[str, str] = {}
        self._rows: dict[str, tuple[str, ...]] = {}  # the open orders table's rows, by ClOrdID
        self._columns: list[ColumnKey] = []
        self._lock = threading.Lock()
        self.pending.extend(client.follow(self.pending.append))  # deque.append is thread-safe

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        with Horizontal():
            with Vertical(id="left"):
                yield WireView(WIRE_LINES, id="wire")
                yield RichLog(id="out", max_lines=500, wrap=True)
            with Vertical(id="right"):
                with Horizontal(id="ticket"):
                    yield Select([("buy", BUY), ("sell", SELL)], value=BUY, allow_blank=False, id="side")
                    yield Input(placeholder="symbol", value="ACORN.LAB", id="symbol")
                    yield Input(placeholder="price", id="price")
                    yield Input(placeholder="qty", id="qty")
                    yield Select([(TIF_NAMES[t], t) for t in TICKET_TIFS], value=DAY,
                                 allow_blank=False, id="tif")
                    yield Button("send", id="send", variant="primary")
                yield OrdersTable(id="orders", cursor_type="row")
                yield Static(id="fills")
                yield Static(id="market")
        yield Input(placeholder="command (help): buy ACORN.LAB 99.90 10, cancel 1, drop, silent, talk, quit",
                    id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#wire", WireView).border_title = "wire (-> you, <- exchange; session messages dim)"
        self.query_one("#out", RichLog).border_title = "answers"
        self.query_one("#orders", DataTable).border_title = "open orders (c cancel, r replace, s status)"
        self.query_one("#fills", Static).border_title = "fills"
        self.query_one("#market", Static).border_title = "books and tape (book SYMBOL)"
        table = self.query_one("#orders", DataTable)
        self._columns = table.add_columns("ClOrdID", "side", "symbol", "qty", "price", "filled", "open",
                                          "OrdStatus")
        self.client.session.on_status = self._status_changed
        self.set_interval(DRAIN_S, self.drain)
        self.set_interval(VIEW_S, self.refresh_views)
        self.query_one("#prompt", Input).focus()
        self.drain()
        self.refresh_views()

    # ------------------------------------------------------------------ the wire and the views

    def drain(self) -> None:
        """Write what the tap decoded since the last tick."""
        backlog = len(self.pending)
        self.max_backlog = max(self.max_backlog, backlog)
        with self._lock:
            notes = list(self._notes)
            self._notes.clear()
        out = self.query_one("#out", RichLog)
        for text, style in notes:
            out.write(Text(text, style=style))
        wire = self.query_one("#wire", WireView)
        if not backlog or not wire.size.width:  # not laid out yet: rows would wrap at a guessed width
            return
        now = time.time_ns()
        self.drains.append((backlog, now - self.pending[0].rec.ns))
        items = []
        for _ in range(backlog):
            d = self.pending.popleft()
            items.append((f"{d.rec.n:>5} {d.text}", style_of(d)))
            self.lag_ns_max = max(self.lag_ns_max, now - d.rec.ns)
        wire.add(items)
        self.shown += backlog

    def refresh_views(self) -> None:
        s = self.client.session
        sender, target = s.seqs()
        x_sender, x_target = s.exchange_seqs()
        flags = (" | SILENT" if s.silent else "") + (" | drop armed" if s.drop_armed else "")
        text = s.text if s.status != LOGGED_ON and s.text else ""
        status = (f" {s.comp_id} -> {s.target} at {s.host}:{s.port} | {s.status.replace('_', ' ')}"
                  f"{': ' + text if text else ''} | seq client {sender}/{target} "
                  f"exchange {x_sender}/{x_target}{flags}")
        if status != self._status:
            self._status = status
            self.query_one("#status", Static).update(status, layout=False)  # sizes are fixed: no layout
        if self.client.version == self._version:
            return
        self._version = self.client.version
        self._update_orders()
        fills = list(self.client.fills)[-6:]
        fill_lines = [f"{f.side} {f.last_qty} {f.symbol} @ {f.last_px}  {f.clordid}" for f in fills]
        self._show("#fills", "\n".join(fill_lines) or "none yet")
        market: list[str] = []
        for symbol in self.client.subscribed():
            market += self.client.book_lines(symbol, BOOK_DEPTH)
        tape = list(self.client.tape)[-TAPE_LINES:]
        if tape:
            market.append("tape:")
            market += [f"  {t.symbol} {t.qty} @ {t.price}  "
                       f"{time.strftime('%H:%M:%S', time.gmtime(t.ns // 10**9))}"
                       + ("  auction (uncross)" if t.auction else "") for t in reversed(tape)]
        self._show("#market", "\n".join(market) or "no subscription: type book ACORN.LAB")

    def _show(self, selector: str, text: str) -> None:
        if self._shown_text.get(selector) != text:
            self._shown_text[selector] = text
            # As text, never markup: a symbol or a Text (58) from the exchange may hold "[...]".
            self.query_one(selector, Static).update(Text(text), layout=False)

    def _update_orders(self) -> None:
        """Change only the rows that changed: a table rebuilt whole costs its every cell's measure."""
        table = self.query_one("#orders", DataTable)
        rows = {o.clordid: (o.clordid, SIDE_NAMES.get(o.side, str(o.side)), o.symbol, str(o.qty), o.price,
                            str(o.cum_qty), str(o.leaves_qty), self.client.status_name(o.status))
                for o in self.client.open_orders()}
        for key in [k for k in self._rows if k not in rows]:
            table.remove_row(key)
            del self._rows[key]
        for key, cells in rows.items():
            old = self._rows.get(key)
            if old is None:
                table.add_row(*cells, key=key)
            elif old != cells:
                for column, (was, now) in zip(self._columns, zip(old, cells, strict=True), strict=True):
                    if was != now:
                        table.update_cell(key, column, now)
            self._rows[key] = cells

    def note(self, text: str, style: str = "") -> None:
        """A line in the answers pane; from any thread."""
        with self._lock:
            self._notes.append((text, style))

    def _status_changed(self, status: str, text: str) -> None:  # engine or tap thread
        if status == LOGGED_ON:
            self.note(f"logged on as {self.client.session.comp_id}", "green")
        elif text:
            self.note(f"session {status.replace('_', ' ')}: {text}", "bold red")

    # ------------------------------------------------------------------ commands

    def run_command(self, line: str) -> None:
        try:
            cmd = parse(line)
        except CommandError as exc:
            self.note(f"error: {exc}", "red")
            return
        if cmd is None:
            return
        if cmd.verb == QUIT:
            self.action_quit_client()
            return
        try:
            lines = self.client.execute(cmd)
        except CommandError as exc:
            self.note(f"error: {exc}", "red")
            return
        if cmd.verb in ("buy", "sell"):
            self.note(f"sent: {self.client.describe(cmd)}")
        for text in lines:
            self.note(text)
        if cmd.verb == "book":  # the book panel shows the phase: follow its SecurityStatus too
            self.run_command(f"status {cmd.symbol}")

    @on(Input.Submitted, "#prompt")
    def _prompt(self, event: Input.Submitted) -> None:
        event.input.value = ""
        self.run_command(event.value)
        self.drain()

    @on(Button.Pressed, "#send")
    def _ticket(self) -> None:
        side = self.query_one("#side", Select).value
        tif = self.query_one("#tif", Select).value
        symbol = self.query_one("#symbol", Input).value.strip()
        price = self.query_one("#price", Input).value.strip()
        qty = self.query_one("#qty", Input).value.strip()
        verb = "buy" if side == BUY else "sell"
        tif_word = TICKET_TIFS.get(tif if isinstance(tif, int) else DAY, "day")
        self.run_command(f"{verb} {symbol or '?'} {price or '?'} {qty or '?'} {tif_word}")
        self.drain()

    def _selected(self) -> str | None:
        table = self.query_one("#orders", DataTable)
        if not table.row_count:
            self.note("error: no open order selected", "red")
            return None
        return str(table.get_row_at(table.cursor_row)[0])

    def action_cancel_selected(self) -> None:
        if (clordid := self._selected()) is not None:
            self.run_command(f"cancel {clordid}")

    def action_status_selected(self) -> None:
        if (clordid := self._selected()) is not None:
            self.run_command(f"status {clordid}")

    def action_replace_selected(self) -> None:
        if (clordid := self._selected()) is not None:
            prompt = self.query_one("#prompt", Input)
            prompt.value = f"replace {clordid} "
            prompt.focus()

    def action_drop(self) -> None:
        self.run_command("drop")

    def action_silent(self) -> None:
        self.run_command("silent")

    def action_talk(self) -> None:
        self.run_command("talk")

    def action_seq(self) -> None:
        self.run_command("seq")

    def action_quit_client(self) -> None:
        self.exit(0)
