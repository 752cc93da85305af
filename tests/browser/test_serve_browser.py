"""`contextlens serve` in a real browser: Debian's Chromium, headless, driven by Playwright.

The server runs as its own process on a free port. The page's terminal (xterm.js) draws on
a canvas, so what the app showed is read from the bytes the browser received over the
page's websocket (the app's terminal output), and that the browser drew it from the
terminal's text layer having pixels. A key pressed in the page goes the user's way:
keyboard -> xterm.js -> websocket -> the app.

Every page is watched: a request to any host but this machine fails the test (and is not
sent), so is a websocket elsewhere, and so is a resource the page's Content-Security-Policy
refused (the page is ours: inspector/web/templates).

Needs ``chromium`` (apt) and the ``browser`` extra (Playwright's Python API only: no
browser download); ``.ci/run`` installs both.
"""

from __future__ import annotations

import re
import shutil
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import pytest
# STARTUP_S: generous, two cores shared by parallel test workers and a cold Python per tab
from support.serving import STARTUP_S, serving, token_of

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

LOOPBACK = {"localhost", "127.0.0.1", "::1"}

_CSI = re.compile(r"\x1b\[[0-9;?$]*[A-Za-z]|\x1b\][^\x07]*\x07")


@contextmanager
def _serving(db: Path, log: Path) -> Iterator[str]:
    """``contextlens serve DB`` on a free port, as its own process; the URL it printed (with
    this run's token: the one way in) once it answers with the app's page."""
    with serving(db, log) as url:
        port = urlsplit(url).port
        assert url == f"http://localhost:{port}/?token={token_of(url)}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            page = resp.read().decode("utf-8")
        # the app's page: textual-serve's terminal, pointed at this server's websocket with
        # the token in its path
        assert 'class="textual-terminal"' in page
        assert f'data-session-websocket-url="ws://localhost:{port}/ws/{token_of(url)}"' in page
        assert f"<div>contextlens {db.name}</div>" in page  # the path the user named
        yield url


@pytest.fixture(scope="module")
def served(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _serving(sample_db, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url


class _Guard:
    """What a page tried to reach beyond this machine, and what its policy refused."""

    def __init__(self) -> None:
        self.foreign: list[str] = []
        self.refused: list[str] = []

    def route(self, route: Any) -> None:
        url = route.request.url
        if urlsplit(url).scheme in ("data", "blob") or urlsplit(url).hostname in LOOPBACK:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()  # never sent: a test must not tell a third party either

    def websocket(self, ws: Any) -> None:
        if urlsplit(ws.url).hostname not in LOOPBACK:
            self.foreign.append(ws.url)

    def console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            self.refused.append(message.text)

    def watch(self, page: Any) -> None:
        page.on("websocket", self.websocket)
        page.on("console", self.console)

    def check(self) -> None:
        assert self.foreign == [], "the page reached beyond this machine"
        assert self.refused == [], "the page's policy refused its own resources"


@contextmanager
def _browser(tmp_path: Path) -> Iterator[tuple[Any, _Guard]]:
    """Chromium (the system's, headless) with every request of its pages guarded; the
    guard is checked when the test's pages are done."""
    from playwright.sync_api import sync_playwright

    guard = _Guard()
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM,
            args=CHROMIUM_ARGS, headless=True, viewport={"width": 1400, "height": 900},
        )
        try:
            context.route("**/*", guard.route)
            context.on("page", guard.watch)
            yield context, guard
        finally:
            context.close()
    guard.check()


class _Screen:
    """What the app sent to one page, as text without terminal escape sequences."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.chunks: list[str] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._received))

    def _received(self, payload: Any) -> None:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        self.chunks.append(text)

    def mark(self) -> int:
        return len(self.chunks)

    def text(self, since: int = 0) -> str:
        return _CSI.sub("", "".join(self.chunks[since:]))

    def wait_for(self, shown: Callable[[str], Any], what: str, since: int = 0) -> Any:
        """``shown(text)`` once it is true of what the page received (the app draws a screen
        in several writes)."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            self.page.wait_for_timeout(250)  # Playwright delivers the frames meanwhile
            found = shown(self.text(since))
            if found:
                return found
        pytest.fail(f"the page never showed {what}; it showed: {self.text(since)[-3000:]!r}")


def _drawn_pixels(page: Any) -> int:
    """Pixels the terminal has drawn on its canvases (0 for a blank terminal)."""
    return int(page.evaluate("""() => {
        let n = 0;
        for (const c of document.querySelectorAll('.xterm-screen canvas')) {
            const ctx = c.getContext('2d');
            if (!ctx || !c.width || !c.height) continue;
            const data = ctx.getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < data.length; i += 4) if (data[i]) n++;
        }
        return n;
    }"""))


def test_the_request_list_renders_in_chromium_and_enter_opens_an_assembly(
        served: str, sample_db: Path, tmp_path: Path) -> None:
    from ingest.store import Store

    with Store.open(sample_db) as store:
        ids = set(store.list_assemblies(None)["assembly_id"].to_pylist())
        assert len(ids) == 52

        def listed(text: str) -> set[str]:
            """The sample's requests on the page, once it lists a screenful of them."""
            found = set(re.findall(r"\basm-\d{3}\b", text)) & ids
            return found if len(found) >= 20 else set()

        def opened(text: str) -> str | None:
            """The assembly the page opened, once its first records are shown."""
            hit = re.search(r"assembly (asm-\d{3})", text)
            if hit is None or "Context" not in text or "Omitted" not in text:
                return None
            records = store.assembly_records(hit.group(1), "included")["record_id"].to_pylist()
            return hit.group(1) if all(r in text for r in records[:3]) else None

        with _browser(tmp_path) as (context, _guard):
            page = context.new_page()
            screen = _Screen(page)
            page.goto(served)
            shown = screen.wait_for(listed, "the request list")
            assert _drawn_pixels(page) > 0  # the browser drew the terminal's text
            before = page.screenshot()

            mark = screen.mark()
            page.focus(".xterm-helper-textarea")
            page.keyboard.press("Enter")
            aid = screen.wait_for(opened, "an assembly screen", since=mark)
            assert aid in shown  # the request highlighted in the list
            assert page.screenshot() != before


@contextmanager
def _another_site() -> Iterator[str]:
    """A page of another site on this machine (any local server on another port: another
    origin), served from a thread; its URL. A real server, not a fulfilled route: Chromium
    keeps a page whose address it does not know from reaching loopback at all, which would
    hide what this server does."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = b"<html><body>another site</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            """Quiet."""

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}/"
    finally:
        site.shutdown()
        site.server_close()
        thread.join()


def test_without_its_token_the_page_is_refused_and_another_sites_page_cannot_connect(
        served: str, tmp_path: Path) -> None:
    """Issue 27: any web page open in the user's browser could drive the served app over
    its websocket. The URL without its token is refused (403, no websocket opened); a page
    of another site that even knows the token cannot open the app's websocket: its Origin
    is refused."""
    with _browser(tmp_path) as (context, _guard), _another_site() as elsewhere:
        page = context.new_page()
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        response = page.goto(served.split("?", 1)[0])
        assert response is not None and response.status == 403
        assert sockets == []

        other = context.new_page()
        other.goto(elsewhere)
        port = urlsplit(served).port
        outcome = other.evaluate("""(url) => new Promise(done => {
            const ws = new WebSocket(url);
            ws.onopen = () => { ws.close(); done("opened"); };
            ws.onclose = () => done("refused");
        })""", f"ws://localhost:{port}/ws?token={token_of(served)}&width=80&height=24")
        assert outcome == "refused"


# the scale sample: its list loads for seconds (rows, then each page's lint), long enough
# for many clicks (tests/app/test_app_list_hands.py drives the same load with Pilot)
SCALE = 2500
CLICK_EVERY_MS = 300  # the reproduction's pace (issue 26): a click every 0.3 s
CLICKS_AT_MOST = 400  # a bound for a load that never ends to fail, not a timing


@pytest.fixture(scope="module")
def served_big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from support.big_store import scale_store

    root = tmp_path_factory.mktemp("serve-big")
    with _serving(scale_store(root, SCALE), root / "serve.log") as url:
        yield url


def _session_ended(page: Any) -> bool:
    """The page's "Session ended." dialog: the app's process is gone."""
    return bool(page.evaluate("() => document.body.classList.contains('-closed')"))


def test_clicking_rows_while_the_list_loads_keeps_the_session(
        served_big: str, tmp_path: Path) -> None:
    """Issue 26: clicks on the request list while it loaded ended the page with "Session
    ended." (the app crashed on a table being replaced). Click two rows in turn from the
    first thing drawn until the list's lint has loaded; the app is alive and answers."""
    from inspector.widgets.request_columns import MARKER_LEGEND

    with _browser(tmp_path) as (context, _guard):
        page = context.new_page()
        screen = _Screen(page)
        page.goto(served_big)
        screen.wait_for(lambda text: "requests" in text, "the request list's first rows")
        terminal = page.locator(".xterm-screen").bounding_box()
        assert terminal is not None
        # two rows of the table, a few lines apart: each click moves the cursor, none
        # clicks the highlighted row (which would open it)
        rows = [terminal["y"] + terminal["height"] * f for f in (0.35, 0.45)]
        x = terminal["x"] + 60
        clicks = 0
        while clicks < 10 or MARKER_LEGEND not in screen.text():
            assert clicks < CLICKS_AT_MOST, "the list never finished loading"
            page.mouse.click(x, rows[clicks % 2])
            clicks += 1
            page.wait_for_timeout(CLICK_EVERY_MS)  # Playwright delivers the frames meanwhile
            assert not _session_ended(page), f"the session ended after {clicks} clicks"
        # alive: a key still reaches the app, which answers with its help
        mark = screen.mark()
        page.focus(".xterm-helper-textarea")
        page.keyboard.press("?")
        screen.wait_for(lambda text: "One key, one meaning" in text, "the help", since=mark)
        assert not _session_ended(page)
