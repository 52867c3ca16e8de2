"""Ports and previews: what listens in the sandbox, and URLs that open it. The fake driver's
sandbox shares the host's loopback, so an app this test serves on 127.0.0.1 is the agent's;
its preview is reached through the preview listener with the preview's host as ``Host``
(``*.localhost`` need not resolve here)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import pytest

from agenthold import Agent, AsyncAgent, Conflict, InvalidRequest, NotFound, Preview

from .conftest import Server


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the sandbox"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: pytest shows stderr of failed tests


@pytest.fixture
def app() -> Iterator[int]:
    """An HTTP app on 127.0.0.1 (the sandbox's loopback here); its port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


def through_listener(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """``GET url`` sent to the preview listener on 127.0.0.1, with the URL's host as ``Host``."""
    u = urlsplit(url)
    target = f"http://127.0.0.1:{u.port}{u.path or '/'}" + (f"?{u.query}" if u.query else "")
    return httpx.get(target, headers={"Host": u.netloc, **(headers or {})}, timeout=30)


def test_ports_lists_a_listener_of_the_sandbox(agent: Agent, app: int) -> None:
    ports = agent.ports()
    assert any(p.port == app and p.address == "127.0.0.1" for p in ports), ports
    assert [p.port for p in ports] == sorted(p.port for p in ports)


def test_create_list_delete(fresh: Agent, app: int) -> None:
    p = fresh.previews.create(app, access="public")
    assert isinstance(p, Preview)
    assert p.port == app and p.access == "public" and p.token is None
    assert p.host == f"{app}-{fresh.name}.localhost:{urlsplit(p.url).port}"
    assert p.url == f"http://{p.host}/"
    assert p.created_at is not None and p.expires_at is None

    r = through_listener(p.url)
    assert (r.status_code, r.text) == (200, "hello from the sandbox")

    assert [(q.id, q.url) for q in fresh.previews.list()] == [(p.id, p.url)]
    with pytest.raises(Conflict) as e:
        fresh.previews.create(app)
    assert p.id in str(e.value)

    fresh.previews.delete(p.id)
    assert fresh.previews.list() == []
    assert through_listener(p.url).status_code == 410
    with pytest.raises(NotFound):
        fresh.previews.delete(p.id)


def test_a_token_preview_opens_with_its_token_only(fresh: Agent, app: int) -> None:
    p = fresh.previews.create(app, access="token", expires_in_minutes=30)
    assert p.access == "token" and p.token
    assert p.expires_at is not None and p.created_at is not None
    assert 29 * 60 <= (p.expires_at - p.created_at).total_seconds() <= 30 * 60 + 1
    assert through_listener(p.url).status_code == 401
    r = through_listener(p.url, {"Authorization": f"Bearer {p.token}"})
    assert (r.status_code, r.text) == (200, "hello from the sandbox")
    # The token is in the creation's answer only.
    (listed,) = fresh.previews.list()
    assert listed.id == p.id and listed.token is None


def test_a_private_preview_opens_with_the_admin_token(
    fresh: Agent, app: int, server: Server
) -> None:
    p = fresh.previews.create(app)
    assert p.access == "private"
    assert through_listener(p.url).status_code == 401
    r = through_listener(p.url, {"Authorization": f"Bearer {server.token}"})
    assert (r.status_code, r.text) == (200, "hello from the sandbox")


def test_get_host_reuses_the_ports_preview_or_makes_a_private_one(fresh: Agent, app: int) -> None:
    public = fresh.previews.create(app, access="public")
    assert fresh.get_host(app) == public.host
    assert len(fresh.previews.list()) == 1

    other = app + 1 if app < 65535 else app - 1
    host = fresh.get_host(other)
    assert host == f"{other}-{fresh.name}.localhost:{urlsplit(public.url).port}"
    assert "/" not in host
    made = {p.port: p for p in fresh.previews.list()}
    assert made[other].access == "private" and made[other].host == host
    assert fresh.get_host(other) == host
    assert len(fresh.previews.list()) == 2


def test_bad_ports_are_refused(fresh: Agent) -> None:
    with pytest.raises(InvalidRequest):
        fresh.previews.create(0)
    with pytest.raises(InvalidRequest):
        fresh.previews.create(70000)
    with pytest.raises(InvalidRequest):
        fresh.previews.create(8000, expires_in_minutes=0)


async def test_async_ports_and_previews(afresh: AsyncAgent, app: int) -> None:
    assert any(p.port == app for p in await afresh.ports())
    host = await afresh.get_host(app)
    (p,) = await afresh.previews.list()
    assert p.host == host and p.access == "private"
    assert await afresh.get_host(app) == host
    with pytest.raises(Conflict):
        await afresh.previews.create(app, access="public")
    await afresh.previews.delete(p.id)
    assert await afresh.previews.list() == []
    p = await afresh.previews.create(app, access="public")
    r = through_listener(p.url)
    assert (r.status_code, r.text) == (200, "hello from the sandbox")
