"""``contextlens serve``'s web server: textual-serve's, made self-contained, quiet until it
listens, and answering its own page only.

- The page is our copy of textual-serve's (``templates/app_index.html``): its font comes
  from textual-serve's own static folder instead of a third-party host, and its
  Content-Security-Policy lets it reach this server only. Logs served here are sensitive;
  the page must not tell anyone else that it was opened, or from where.
- Any web page the user has open, and any local process, can reach a port on this
  machine: the served app (reveal included) would be theirs. So every request but
  textual-serve's static files (its script, stylesheet and fonts, the same for everyone)
  carries this run's secret token, given only in the URL ``serve`` prints (as Jupyter
  does), and every request names this server in its Host (a DNS-rebinding page names its
  own) and, when it says one, in its Origin (a cross-site websocket says the page's). A
  request failing either is answered 403 before any websocket upgrade, so before any
  screen is sent. The page passes the token on in its websocket's path
  (``/ws/TOKEN``): textual-serve's script appends ``?width=...`` to the URL it is given.
  textual-serve's downloads (``/download/KEY``, opened by its script without the token)
  are refused with the rest: the app delivers no files to the browser.
- textual-serve prints its banner when the web app starts, before the port is bound, so a
  taken port printed the banner then the error. Here the banner is printed by aiohttp once
  every socket listens, and a port that cannot be bound raises ``OSError`` before any
  output.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import signal
from pathlib import Path
from typing import Any, Awaitable, Callable

from textual_serve.server import Server

TEMPLATES = Path(__file__).parent / "templates"
# the query parameter (any path) or the websocket path's last part (/ws/TOKEN) holding it
TOKEN_PARAM = "token"
# the names this machine answers to when it is served on a loopback (or every) interface
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_WILDCARDS = ("", "0.0.0.0", "::")


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host headers naming the served address ``host:port`` (lower case): that one, and
    for a loopback or wildcard bind its loopback equivalents (a browser on this machine may
    say localhost, 127.0.0.1 or [::1] for the same server). Port 80 may go unsaid."""
    name = host.lower()
    names = {f"[{name}]" if ":" in name and not name.startswith("[") else name}
    if _is_loopback(host) or name in _WILDCARDS:
        names.update(LOOPBACK_NAMES)
    names.discard("")
    hosts = {f"{n}:{port}" for n in names}
    if port == 80:
        hosts.update(names)
    return frozenset(hosts)


def public_url(host: str, port: int) -> str:
    """``http://host:port`` with an IPv6 literal bracketed."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{name}:{port}"


class LocalServer(Server):
    """A textual-serve ``Server`` whose page loads nothing from another host, and that
    answers only requests carrying its token and naming it in Host and Origin."""

    def __init__(self, command: str, *, host: str, port: int, title: str,
                 listening: Callable[[str], None]) -> None:
        # textual-serve writes ``http://HOST:PORT``, which for an IPv6 address (``::1``) is
        # no URL at all: the literal goes in brackets (RFC 3986), here and in the page's
        # websocket address, which is built from the same public URL.
        super().__init__(command, host=host, port=port, title=title,
                         templates_path=TEMPLATES, public_url=public_url(host, port))
        self._listening = listening
        self.token = secrets.token_urlsafe(32)
        self.hosts = allowed_hosts(host, port)
        self.origins = frozenset(f"http://{h}" for h in self.hosts)

    @property
    def url(self) -> str:
        """The page's address, token included: the one way in."""
        return f"{self.public_url}/?{TOKEN_PARAM}={self.token}"

    def refusal(self, headers: Any, path: str, token: str | None) -> str | None:
        """Why a request is refused (None: it is not): the check itself, apart from aiohttp."""
        host = headers.get("Host")
        if host is None or host.lower() not in self.hosts:
            return "not this server's address (Host)"
        origin = headers.get("Origin")
        if origin is not None and origin.lower() not in self.origins:
            return "another site's page (Origin)"
        if path.startswith("/static/"):
            return None  # textual-serve's own files: the same for everyone
        if token is None or not secrets.compare_digest(token.encode(), self.token.encode()):
            return "no valid token (open the URL contextlens serve printed)"
        return None

    async def _make_app(self) -> Any:
        import aiohttp_jinja2
        from aiohttp import web

        @web.middleware
        async def admit(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                        ) -> web.StreamResponse:
            token = request.match_info.get(TOKEN_PARAM) or request.query.get(TOKEN_PARAM)
            why = self.refusal(request.headers, request.path, token)
            if why is not None:
                raise web.HTTPForbidden(text=f"403: {why}\n")
            return await handler(request)

        app = await super()._make_app()
        app.middlewares.append(admit)
        app.router.add_get(f"/ws/{{{TOKEN_PARAM}}}", self.handle_websocket)
        # the page hands the token to its websocket (templates/app_index.html)
        aiohttp_jinja2.get_env(app).globals[TOKEN_PARAM] = self.token
        return app

    async def on_startup(self, app: Any) -> None:
        """Nothing yet: the port may still turn out to be taken (see ``serve``)."""

    def serve(self, debug: bool = False) -> None:
        """``Server.serve`` (textual-serve 1.1.3), with aiohttp's "running on" message,
        which it prints once every site listens, replaced by ``listening(url)``."""
        from aiohttp import web

        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.add_signal_handler(signal.SIGINT, self.request_exit)
            loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        except NotImplementedError:  # (Windows)
            pass
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            handle_signals=False,
            loop=loop,
            print=lambda *_args: self._listening(self.url),
        )
