"""The parts that need no server: stream decoders, value parsing and error mapping (through
an ``httpx.MockTransport``, for the statuses a real server is hard to make answer)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

import agenthold
from agenthold import (
    AgentEvent,
    AgentholdError,
    AsyncClient,
    Client,
    Conflict,
    DeletedEvent,
    EgressEvent,
    Forbidden,
    InvalidRequest,
    NoSpace,
    NotFound,
    OutputChunk,
    OutputGap,
    ProcessEvent,
    PullEvent,
    RateLimited,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnknownEvent,
)
from agenthold._decode import parse_time
from agenthold._http import resolve_settings
from agenthold._lines import NdjsonDecoder, SseDecoder
from agenthold.commands import argv
from agenthold.errors import error_for
from agenthold.models import AgentInfo, Process, parse_event
from agenthold.processes import ProcessHandle

AGENT = {
    "id": "k3f9x2m1q8ab",
    "name": "builder",
    "image": "debian:bookworm-slim",
    "cpus": 2,
    "memoryMb": 4096,
    "diskMb": None,
    "egress": {"allow": ["pypi.org"], "deny": []},
    "idleMinutes": 15,
    "state": "running",
    "error": None,
    "needsRebuild": False,
    "createdAt": "2026-11-29T07:00:00.123456789Z",
    "lastActivityAt": "2026-11-29T07:10:00Z",
    "sleepsAt": None,
    "pull": None,
    "someFutureField": 1,
}


def test_sse_decoder_handles_split_chunks_crlf_comments_and_multiline_data() -> None:
    raw = (
        b': keep-alive\r\n\r\nevent: agent\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
        b'event: deleted\ndata: {"id":"x"}\n\nevent: pull\rdata: \xc3\xa9\r\r'
    )
    for size in (1, 2, 3, 7, len(raw)):
        dec = SseDecoder()
        out = []
        for i in range(0, len(raw), size):
            out += dec.feed(raw[i : i + size])
        assert [(m.event, m.data) for m in out] == [
            ("agent", '{"a":\n1}'),
            ("deleted", '{"id":"x"}'),
            ("pull", "é"),
        ], size


def test_ndjson_decoder_waits_for_whole_lines() -> None:
    dec = NdjsonDecoder()
    assert dec.feed(b'{"a": 1}\n{"b"') == [{"a": 1}]
    assert dec.pending
    assert dec.feed(b": 2}\n\n") == [{"b": 2}]
    assert not dec.pending


def test_times_parse_with_z_and_nanoseconds() -> None:
    assert parse_time("2026-11-29T07:00:00.123456789Z") == datetime(
        2026, 11, 29, 7, 0, 0, 123456, tzinfo=timezone.utc
    )
    assert parse_time("2026-11-29T07:00:00Z") == datetime(2026, 11, 29, 7, tzinfo=timezone.utc)
    assert parse_time(None) is None and parse_time("garbage") is None


def test_agent_info_reads_every_field_and_ignores_unknown_ones() -> None:
    a = AgentInfo.from_json(AGENT)
    assert (a.id, a.name, a.state, a.cpus, a.memory_mb, a.disk_mb) == (
        "k3f9x2m1q8ab",
        "builder",
        "running",
        2.0,
        4096,
        None,
    )
    assert a.egress is not None and a.egress.allow == ("pypi.org",)
    assert a.created_at is not None and a.created_at.microsecond == 123456
    assert a.sleeps_at is None and a.pull is None and not a.needs_rebuild


def test_fields_of_another_type_read_as_empty() -> None:
    a = AgentInfo.from_json(
        {
            "id": 3,
            "cpus": True,
            "memoryMb": "4096",
            "diskMb": "x",
            "egress": ["pypi.org"],
            "env": {"A": 1, "B": "b"},
            "createdAt": 5,
            "setup": {"state": "done", "exitCode": 1.0},
        }
    )
    assert (a.id, a.cpus, a.memory_mb, a.disk_mb, a.egress, a.env, a.created_at) == (
        "",
        0.0,
        0,
        None,
        None,
        {"B": "b"},
        None,
    )
    assert a.setup is not None and a.setup.exit_code == 1
    assert Process.from_json({"command": ["ls", 1, "-l"], "pid": None}).command == ("ls", "-l")


def test_events_are_typed_and_unknown_kinds_pass_through() -> None:
    assert isinstance(parse_event("agent", AGENT), AgentEvent)
    assert parse_event("deleted", {"id": "x"}) == DeletedEvent("x")
    pull = parse_event("pull", {"id": "x", "image": "i:1", "status": "pulling", "percent": 27})
    assert isinstance(pull, PullEvent) and pull.progress.percent == 27
    eg = parse_event(
        "egress",
        {
            "id": "x",
            "host": "pypi.org",
            "port": 443,
            "allowed": True,
            "rule": "pypi.org",
            "closed": False,
            "bytesUp": 0,
            "bytesDown": 0,
        },
    )
    assert isinstance(eg, EgressEvent) and eg.host == "pypi.org" and eg.allowed
    pe = parse_event("process", {"id": "x", "process": {"id": "p", "state": "running"}})
    assert isinstance(pe, ProcessEvent) and pe.process.running
    unknown = parse_event("quota", {"id": "x", "left": 3})
    assert unknown == UnknownEvent("quota", {"id": "x", "left": 3}) and unknown.kind == "quota"


def test_output_lines_decode_text_and_base64() -> None:
    text = OutputChunk.from_json({"offset": 4, "stream": "stderr", "data": "é\n"})
    assert (text.offset, text.stream, text.data, text.end) == (4, "stderr", b"\xc3\xa9\n", 7)
    raw = OutputChunk.from_json({"offset": 0, "stream": "stdout", "data64": "/wo="})
    assert raw.data == b"\xff\n" and raw.text == "\ufffd\n"


def test_a_string_command_runs_under_sh_and_a_list_as_is() -> None:
    assert argv("echo hi") == ["sh", "-c", "echo hi"]
    assert argv(["ls", "-l"]) == ["ls", "-l"]
    with pytest.raises(ValueError):
        argv([])


def test_settings_come_from_arguments_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTHOLD_URL", "http://h:1/api/v1/")
    monkeypatch.setenv("AGENTHOLD_TOKEN", "tok")
    assert resolve_settings(None, None) == ("http://h:1", "tok")
    assert resolve_settings("http://x:2", "t2") == ("http://x:2", "t2")
    monkeypatch.delenv("AGENTHOLD_URL")
    monkeypatch.delenv("AGENTHOLD_TOKEN")
    assert resolve_settings(None, None) == ("http://127.0.0.1:8080", None)


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "invalid", InvalidRequest),
        (401, "unauthorized", Unauthorized),
        (403, "forbidden", Forbidden),
        (404, "not_found", NotFound),
        (409, "conflict", Conflict),
        (413, "too_large", TooLarge),
        (429, "too_many_requests", RateLimited),
        (507, "no_space", NoSpace),
        (503, "unavailable", Unavailable),
        (500, "internal", ServerError),
    ],
)
def test_each_error_code_has_its_class(status: int, code: str, cls: type[AgentholdError]) -> None:
    e = error_for(status, {"error": {"code": code, "message": "why", "field": "cpus"}})
    assert type(e) is cls
    assert (e.code, e.message, e.field, e.status) == (code, "why", "cpus", status)


def _mock(status: int, body: bytes, ctype: str) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(status, content=body, headers={"Content-Type": ctype})
    )


@pytest.mark.parametrize(
    ("status", "body", "cls", "code"),
    [
        (
            429,
            b'{"error":{"code":"too_many_requests","message":"busy"}}',
            RateLimited,
            "too_many_requests",
        ),
        (507, b'{"error":{"code":"no_space","message":"full"}}', NoSpace, "no_space"),
        (500, b'{"error":{"code":"internal","message":"oops"}}', ServerError, "internal"),
        (503, b"Service Unavailable: too many connections", Unavailable, "unavailable"),
        (502, b"<html>bad gateway</html>", ServerError, "error"),
        (418, b'{"error":{"code":"teapot","message":"short and stout"}}', ServerError, "teapot"),
    ],
)
def test_error_answers_raise_through_the_client(
    status: int, body: bytes, cls: type[AgentholdError], code: str
) -> None:
    ctype = "application/json" if body.startswith(b"{") else "text/plain"
    http = httpx.Client(transport=_mock(status, body, ctype))
    with http, Client("http://mock", "t", http=http) as c, pytest.raises(cls) as info:
        c.agents.list()
    assert info.value.status == status and info.value.code == code


async def test_error_answers_raise_through_the_async_client() -> None:
    body = b'{"error":{"code":"too_many_requests","message":"busy"}}'
    http = httpx.AsyncClient(transport=_mock(429, body, "application/json"))
    async with AsyncClient("http://mock", "t", http=http) as c:
        with pytest.raises(RateLimited) as info:
            await c.agents.list()
    assert info.value.message == "busy"
    await http.aclose()


def _resuming_server(calls: list[dict[str, str]]) -> httpx.MockTransport:
    """Answers a process's output: the first stream breaks off with the server's error line,
    the second goes on from the offset asked for."""
    exit_line = {"exit": {"id": "p", "state": "exited", "exitCode": 0}}

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(dict(request.url.params))
        if len(calls) == 1:
            lines: list[Any] = [
                {"offset": 0, "stream": "stdout", "data": "abc"},
                {"error": {"code": "unavailable", "message": "tunnel dropped"}},
            ]
        else:
            lines = [{"offset": 3, "stream": "stderr", "data": "def"}, exit_line]
        body = "".join(json.dumps(x) + "\n" for x in lines).encode()
        return httpx.Response(200, content=body, headers={"Content-Type": "application/x-ndjson"})

    return httpx.MockTransport(handle)


def test_output_resumes_from_its_offset_after_the_servers_error_line() -> None:
    calls: list[dict[str, str]] = []
    http = httpx.Client(transport=_resuming_server(calls))
    with http, Client("http://mock", "t", http=http) as c:
        h = ProcessHandle(c._t, "a", Process(id="p", state="running"))
        got = list(h.output())
    assert [(x.offset, x.stream, x.data) for x in got if isinstance(x, OutputChunk)] == [
        (0, "stdout", b"abc"),
        (3, "stderr", b"def"),
    ]
    assert [c["offset"] for c in calls] == ["0", "3"]
    assert h.info.state == "exited" and not any(isinstance(x, OutputGap) for x in got)


def test_the_package_exports_what_it_documents() -> None:
    for name in agenthold.__all__:
        assert hasattr(agenthold, name), name


def test_egress_refusals_and_the_egress_log_are_read() -> None:
    from agenthold.models import (
        CommandResult,
        EgressDenied,
        EgressLogEntry,
        Process,
        ProcessResult,
    )

    r = CommandResult.from_json(
        {
            "exitCode": 1,
            "egressDenied": [
                {"host": "pypi.org", "port": 443, "rule": None},
                {"host": "evil.example", "port": 80, "rule": "evil.example"},
                "junk",
            ],
        }
    )
    assert r.egress_denied == (
        EgressDenied("pypi.org", 443, None),
        EgressDenied("evil.example", 80, "evil.example"),
    )
    assert CommandResult.from_json({"exitCode": 0}).egress_denied == ()
    p = Process.from_json(
        {"id": "p", "state": "exited", "egressDenied": [{"host": "x", "port": 1}]}
    )
    assert p.egress_denied == (EgressDenied("x", 1),)
    # A waited-for background process's result says it too, as a command's does.
    assert ProcessResult(p).egress_denied == (EgressDenied("x", 1),)
    e = EgressLogEntry.from_json(
        {
            "at": "2026-01-01T00:00:00Z",
            "host": "pypi.org",
            "port": 443,
            "allowed": True,
            "rule": "pypi.org",
            "bytesUp": 3,
            "bytesDown": None,
        }
    )
    assert (e.allowed, e.bytes_up, e.bytes_down, e.at is not None) == (True, 3, None, True)
