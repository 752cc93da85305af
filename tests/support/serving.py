"""``contextlens serve`` as its own process, for the tests that connect to it: started on a
free port, and its printed URL (with this run's token) once it says it listens."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

# generous: a cold Python on two shared cores (a bound for a server that never says it
# listens to fail, not a measure)
STARTUP_S = 120.0
# what a terminal would act on, not show: CSI and OSC sequences
CSI = re.compile(r"\x1b\[[0-9;?$]*[A-Za-z]|\x1b\][^\x07]*\x07")
BANNER = re.compile(r"contextlens: serving .* on (http://\S+) \(ctrl\+c stops\)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def printed_url(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The URL serve prints once every socket listens (its banner, in ``log``)."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        found = BANNER.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        assert proc.poll() is None, f"contextlens serve exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"contextlens serve never listened: {log.read_text()}"
        time.sleep(0.1)  # the banner is the process's own word that it listens


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


@contextmanager
def serving(db: Path, log: Path, *argv: str, cwd: Path | None = None,
            python: tuple[str, ...] = (sys.executable,)) -> Iterator[str]:
    """``contextlens serve DB ARGV...`` (a free port unless ARGV names one) as its own
    process, output to ``log``; its printed URL once it listens. Stopped on leaving."""
    if "--port" not in argv:
        argv = (*argv, "--port", str(free_port()))
    with open(log, "wb") as out:
        proc = subprocess.Popen([*python, "-m", "inspector.cli", "serve", str(db), *argv],
                                cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield printed_url(proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def tab_screen(url: str, done: Callable[[str], bool], origin: str | None = None,
                     failed: Callable[[], bool] = lambda: False) -> str:
    """What the app of a new browser tab draws, as text, read from its websocket ``url``
    (sent with ``origin``, if any) until ``done(text)``, the session ends, or ``failed()``
    (looked at while nothing arrives)."""
    import aiohttp

    received: list[str] = []
    text = ""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, origin=origin) as ws:
            for _ in range(int(STARTUP_S)):
                try:
                    message = await ws.receive(timeout=1.0)
                except asyncio.TimeoutError:
                    if failed():
                        break
                    continue
                if message.type == aiohttp.WSMsgType.BINARY:
                    received.append(message.data.decode("utf-8", "replace"))
                elif message.type == aiohttp.WSMsgType.TEXT:
                    received.append(message.data)
                else:
                    break  # closed: the session ended
                text = CSI.sub("", "".join(received))
                if done(text):
                    break
    return text
