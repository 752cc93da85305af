"""``contextlens serve``'s web server: textual-serve's, made self-contained and quiet until
it listens.

- The page is our copy of textual-serve's (``templates/app_index.html``): its font comes
  from textual-serve's own static folder instead of a third-party host, and its
  Content-Security-Policy lets it reach this server only. Logs served here are sensitive;
  the page must not tell anyone else that it was opened, or from where.
- textual-serve prints its banner when the web app starts, before the port is bound, so a
  taken port printed the banner then the error. Here the banner is printed by aiohttp once
  every socket listens, and a port that cannot be bound raises ``OSError`` before any
  output.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any, Callable

from textual_serve.server import Server

TEMPLATES = Path(__file__).parent / "templates"


class LocalServer(Server):
    """A textual-serve ``Server`` whose page loads nothing from another host."""

    def __init__(self, command: str, *, host: str, port: int, title: str,
                 listening: Callable[[str], None]) -> None:
        super().__init__(command, host=host, port=port, title=title,
                         templates_path=TEMPLATES)
        self._listening = listening

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
            print=lambda *_args: self._listening(f"{self.public_url}/"),
        )
