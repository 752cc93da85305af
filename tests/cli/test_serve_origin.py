"""`contextlens serve` answers its own page only (issue 27): a websocket with no token, a
wrong one, another site's Origin or another name in Host (DNS rebinding) is refused with
403 before the upgrade, so before the app sends a screen; the printed URL's page, and the
websocket it names with the page's Origin, are served."""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import aiohttp
import pytest
from support.serving import serving, tab_screen, token_of



@pytest.fixture(scope="module")
def served(sample_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("serve-origin") / "serve.log"
    with serving(sample_db, log, "--host", "127.0.0.1") as url:
        yield url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def _handshake_status(url: str, origin: str | None = None,
                            host: str | None = None) -> int:
    """The status a websocket handshake to ``url`` is answered with (101: upgraded)."""
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(
                    url, origin=origin, headers={"Host": host} if host else None) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


def _ws(url: str, path: str) -> str:
    return f"ws://{urlsplit(url).netloc}{path}"


def test_a_websocket_without_the_token_is_refused(served: str) -> None:
    assert asyncio.run(_handshake_status(_ws(served, "/ws?width=80&height=24"),
                                         _origin(served))) == 403


def test_a_websocket_with_a_wrong_token_is_refused(served: str) -> None:
    wrong = "x" + token_of(served)[1:]
    for path in (f"/ws?token={wrong}", f"/ws/{wrong}?width=80", "/ws/?width=80"):
        assert asyncio.run(_handshake_status(_ws(served, path), _origin(served))) == 403, path


def test_another_sites_origin_is_refused_even_with_the_token(served: str) -> None:
    token = token_of(served)
    port = urlsplit(served).port
    for origin in ("http://evil.example", f"http://evil.example:{port}", "null",
                   f"https://127.0.0.1:{port}"):
        for path in (f"/ws?token={token}", f"/ws/{token}"):
            status = asyncio.run(_handshake_status(_ws(served, path), origin))
            assert status == 403, (origin, path)


def test_another_name_in_host_is_refused_even_with_the_token(served: str) -> None:
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 reaches the
    port, but its requests say Host: evil.example."""
    token = token_of(served)
    port = urlsplit(served).port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}"):
        for path in (f"/ws?token={token}", f"/ws/{token}"):
            status = asyncio.run(_handshake_status(_ws(served, path), f"http://{host}",
                                                   host=host))
            assert status == 403, (host, path)


def _page_status(url: str, host: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_page_needs_the_token_and_this_servers_name(served: str) -> None:
    base = f"http://{urlsplit(served).netloc}/"
    assert _page_status(base) == 403
    assert _page_status(base + "?token=wrong") == 403
    assert _page_status(served, host="evil.example") == 403
    assert _page_status(served) == 200
    # the same server by its other loopback name
    assert _page_status(served.replace("127.0.0.1", "localhost")) == 200


def test_the_pages_own_websocket_is_served(served: str) -> None:
    """The websocket the printed URL's page names (the token in its path), with the
    page's Origin, runs the app: the request list arrives."""
    with urllib.request.urlopen(served, timeout=30) as response:
        page = response.read().decode("utf-8")
    found = re.search(r'data-session-websocket-url="([^"]+)"', page)
    assert found is not None
    ws_url = found.group(1)
    assert ws_url.endswith("/ws/" + token_of(served))
    shown = asyncio.run(tab_screen(ws_url + "?width=120&height=30", lambda text: "asm-0" in text,
                                   origin=_origin(served)))
    assert "asm-0" in shown


def test_the_names_of_the_served_address() -> None:
    """A loopback bind answers to its three loopback names at its port; another interface
    to its own name only; port 80 may go unsaid, as browsers leave it."""
    from inspector.web import allowed_hosts

    assert allowed_hosts("localhost", 8000) == {
        "localhost:8000", "127.0.0.1:8000", "[::1]:8000"}
    assert allowed_hosts("127.0.0.1", 8000) == allowed_hosts("localhost", 8000)
    assert allowed_hosts("192.168.1.5", 80) == {"192.168.1.5:80", "192.168.1.5"}
    assert "evil.example:8000" not in allowed_hosts("0.0.0.0", 8000)


def test_an_ipv6_address_is_bracketed_in_the_printed_url() -> None:
    """``serve --host ::1`` prints a URL a browser can open: the literal in brackets, and the
    page's websocket address (built from the same URL) follows."""
    from inspector.web import allowed_hosts, public_url

    assert public_url("::1", 8765) == "http://[::1]:8765"
    assert public_url("localhost", 8000) == "http://localhost:8000"
    assert "[::1]:8765" in allowed_hosts("::1", 8765)
