"""``agent.run_code`` and ``agent.code.contexts`` on the fake driver: the client's own checks,
the server's refusals as the client's exceptions, and the answers read into models. Runs in a
real kernel are in ``test_docker.py``."""

from __future__ import annotations

import base64

import pytest

from agenthold import (
    Agent,
    AsyncAgent,
    CodeContext,
    Conflict,
    Execution,
    InvalidRequest,
    NotFound,
    Result,
    TooLarge,
    Unavailable,
)
from agenthold.code import _Collector

A_CONTEXT_NOBODY_MADE = "abcdefghjkmnpqrs"


#: What ``python3 -m ipykernel_launcher`` says where ipykernel is not installed. The kernel
#: starts in the home, the first place ``-m`` looks, so this module there stands in for an image
#: without ipykernel whatever this machine's python3 has (the fake driver runs it here).
NO_IPYKERNEL = """import sys
sys.stderr.write(sys.executable + ": No module named ipykernel_launcher\\n")
sys.exit(1)
"""


def test_the_client_refuses_what_it_can_tell_is_wrong(agent: Agent) -> None:
    with pytest.raises(TypeError):
        agent.run_code(b"1 + 1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context"):
        agent.run_code("1", context="")
    with pytest.raises(ValueError, match="timeout"):
        agent.run_code("1", timeout=0)


def test_the_servers_refusals_are_its_exceptions_with_the_field(agent: Agent) -> None:
    with pytest.raises(InvalidRequest) as bad:
        agent.run_code("1", context="../../etc")
    assert bad.value.field == "context" and bad.value.status == 400
    with pytest.raises(TooLarge) as huge:
        agent.run_code("x" * (1024 * 1024 + 1))
    assert huge.value.field == "code"
    with pytest.raises(NotFound):
        agent.run_code("1", context=A_CONTEXT_NOBODY_MADE)
    with pytest.raises(NotFound):
        agent.run_code("1", context=A_CONTEXT_NOBODY_MADE, on_stdout=print)
    with pytest.raises(NotFound):
        agent.code.contexts.restart(A_CONTEXT_NOBODY_MADE)
    with pytest.raises(InvalidRequest) as cid:
        agent.code.contexts.delete("not an id")
    assert cid.value.field == "cid"
    assert agent.code.contexts.list() == []


def test_an_image_without_ipykernel_is_a_conflict_naming_it(fresh: Agent) -> None:
    fresh.files.write("ipykernel_launcher.py", NO_IPYKERNEL)
    with pytest.raises(Conflict, match="ipykernel"):
        fresh.run_code("1 + 1")
    with pytest.raises(Conflict, match="ipykernel"):
        fresh.run_code("1 + 1", on_result=print)
    with pytest.raises(Conflict, match="ipykernel"):
        fresh.code.contexts.create()


async def test_async_refusals_are_the_same(aagent: AsyncAgent) -> None:
    with pytest.raises(ValueError, match="timeout"):
        await aagent.run_code("1", timeout=-1)
    with pytest.raises(InvalidRequest):
        await aagent.run_code("1", context="../../etc")
    with pytest.raises(NotFound):
        await aagent.code.contexts.restart(A_CONTEXT_NOBODY_MADE)
    assert await aagent.code.contexts.list() == []


PNG = b"\x89PNG\r\n\x1a\nnot really"


def test_an_answer_is_read_into_results_output_and_error() -> None:
    answer = {
        "results": [
            {"text/plain": "<Image>", "image/png": base64.b64encode(PNG).decode()},
            {"text/plain": "42"},
            "not an object",
        ],
        "stdout": "hi\n",
        "stderr": "",
        "error": {"name": "ZeroDivisionError", "value": "division by zero", "traceback": "tb"},
        "executionCount": 3,
        "truncated": False,
    }
    e = Execution.from_json(answer)
    assert [r.text for r in e.results] == ["<Image>", "42"]
    assert e.text == "42" and e.stdout == "hi\n" and e.execution_count == 3
    assert e.results[0].png == base64.b64encode(PNG).decode()
    assert e.results[0].bytes() == PNG and e.results[1].bytes() is None
    assert e.results[0].formats == ("text/plain", "image/png")
    assert e.error is not None and (e.error.name, e.error.value) == (
        "ZeroDivisionError",
        "division by zero",
    )
    died = Execution.from_json({"results": [], "error": {"name": "KernelDied"}})
    assert died.execution_count is None and died.error is not None and died.text is None
    context = CodeContext.from_json(
        {"id": "default", "language": "python", "createdAt": "2026-01-02T03:04:05Z"}
    )
    assert context.created_at is not None and context.execution_count == 0


def test_streamed_lines_make_the_same_execution_and_reach_callbacks_in_order() -> None:
    c = _Collector()
    lines = [
        {"stdout": "a"},
        {"stderr": "b"},
        {"result": {"text/plain": "42"}},
        {"stdout": "c"},
        {"error": {"name": "ValueError", "value": "v", "traceback": "t"}},
        {"done": {"executionCount": 7, "truncated": True}},
    ]
    pieces = [c.line(line) for line in lines]
    assert pieces[:4] == [
        ("stdout", "a"),
        ("stderr", "b"),
        ("result", Result({"text/plain": "42"})),
        ("stdout", "c"),
    ]
    e = c.execution()
    assert (e.stdout, e.stderr, e.text, e.execution_count, e.truncated) == (
        "ac",
        "b",
        "42",
        7,
        True,
    )
    assert e.error is not None and e.error.name == "ValueError"


def test_a_stream_that_breaks_off_raises_the_servers_error() -> None:
    c = _Collector()
    c.line({"stdout": "a"})
    with pytest.raises(Unavailable):
        c.line({"error": {"code": "unavailable", "message": "the sandbox went away"}})
    cut = _Collector()
    cut.line({"stdout": "a"})
    with pytest.raises(Unavailable):
        cut.execution()
