"""Background processes: start, list, stdin, output by offset (with gaps, and resumed when the
stream is cut), kill, wait and remove."""

from __future__ import annotations

import threading

import pytest

from agenthold import (
    Agent,
    AsyncAgent,
    AsyncClient,
    Client,
    CommandTimeout,
    InvalidRequest,
    NotFound,
    OutputChunk,
    OutputGap,
    ProcessHandle,
    ProcessResult,
)

from .conftest import CuttingProxy, Server, unique

WAIT = 60.0


def chunks(items: list[OutputChunk | OutputGap]) -> list[tuple[int, str, bytes]]:
    return [(c.offset, c.stream, c.data) for c in items if isinstance(c, OutputChunk)]


def assert_contiguous(items: list[OutputChunk | OutputGap], start: int) -> int:
    """Each piece starts where the last ended; returns the end."""
    at = start
    for c in items:
        if isinstance(c, OutputGap):
            assert c.start == at
            at = c.end
        else:
            assert c.offset == at, (c.offset, at)
            at = c.end
    return at


def test_stdin_eof_output_and_wait(agent: Agent) -> None:
    tag = unique("cat")
    h = agent.commands.run("echo ready; cat; echo done >&2", background=True, stdin=True, tag=tag)
    assert isinstance(h, ProcessHandle)
    assert h.info.running and h.tag == tag and h.info.stdin_open
    assert h.send_stdin("hello\n") == 6
    assert h.send_stdin(b"\xffbye", eof=True) == 4
    p = h.wait(timeout=WAIT)
    assert (p.state, p.exit_code, p.signal) == ("exited", 0, None)
    items = list(h.output(offset=0, follow=True))
    end = assert_contiguous(items, 0)
    assert end == p.output_bytes == len(b"ready\nhello\n\xffbyedone\n")
    out = b"".join(c.data for c in items if isinstance(c, OutputChunk) and c.stream == "stdout")
    err = b"".join(c.data for c in items if isinstance(c, OutputChunk) and c.stream == "stderr")
    assert (out, err) == (b"ready\nhello\n\xffbye", b"done\n")
    assert h.info.state == "exited"  # the exit line updated the handle
    # From an offset: exactly the bytes after it (the streams interleave as the sandbox read
    # them, which may put "done" before or after "\xffbye").
    whole = b"".join(c[2] for c in chunks(items))
    later = list(h.output(offset=6, follow=False))
    assert chunks(later)[0][0] == 6
    assert assert_contiguous(later, 6) == end
    assert b"".join(c[2] for c in chunks(later)) == whole[6:]


def test_follow_delivers_output_as_it_comes(agent: Agent) -> None:
    h = agent.commands.run("cat", background=True, stdin=True)
    it = h.output(offset=0, follow=True)
    h.send_stdin("one\n")
    first = next(it)  # arrives while cat still runs: its stdin is open
    assert isinstance(first, OutputChunk) and (first.offset, first.data) == (0, b"one\n")
    assert h.refresh().running
    h.send_stdin("two\n")
    h.close_stdin()
    rest = list(it)
    assert chunks(rest) == [(4, "stdout", b"two\n")]
    assert h.info.state == "exited"


def test_kill_wait_list_get_and_remove(agent: Agent) -> None:
    tag = unique("sleep")
    h = agent.commands.run(["sleep", "300"], background=True, tag=tag, keep_awake=True)
    assert h.info.keep_awake
    with pytest.raises(CommandTimeout) as info:
        h.wait(timeout=0.2)
    assert info.value.process is not None and info.value.process.running
    assert tag in {p.tag for p in agent.commands.list()}
    same = agent.commands.get(tag)
    assert same.id == h.id and agent.commands.get(h.id).tag == tag
    assert h.kill() is True
    p = h.wait(timeout=WAIT)
    assert (p.state, p.signal, p.exit_code) == ("killed", "TERM", None)
    assert h.kill("KILL") is False  # it has ended
    with pytest.raises(InvalidRequest):
        h.kill("NOSUCHSIGNAL")
    h.remove()
    with pytest.raises(NotFound):
        agent.commands.get(h.id)


def test_callbacks_of_a_background_process_get_its_output_as_it_comes(agent: Agent) -> None:
    out: list[str] = []
    err: list[str] = []
    first = threading.Event()

    def on_stdout(text: str) -> None:
        out.append(text)
        first.set()

    h = agent.commands.run(
        "echo one; cat; printf 'caf\\303' ; printf '\\251\\n'; echo oops >&2",
        background=True,
        stdin=True,
        on_stdout=on_stdout,
        on_stderr=err.append,
    )
    # "one" reaches the callback while the process still runs (cat waits for its stdin).
    assert first.wait(WAIT), "no output reached on_stdout while the process ran"
    assert h.refresh().running and "".join(out) == "one\n"
    h.send_stdin("two\n", eof=True)
    p = h.wait(timeout=WAIT)  # returns once the callbacks have had everything
    assert (p.state, p.exit_code) == ("exited", 0)
    assert "".join(out) == "one\ntwo\ncafé\n" and "".join(err) == "oops\n"


def test_wait_with_output_returns_stdout_and_stderr(agent: Agent) -> None:
    h = agent.commands.run("echo out; echo err >&2; exit 3", background=True)
    r = h.wait(timeout=WAIT, with_output=True)
    assert isinstance(r, ProcessResult)
    assert (r.stdout, r.stderr, r.exit_code, r.ok, r.incomplete) == (
        "out\n",
        "err\n",
        3,
        False,
        False,
    )
    assert r.process.state == "exited" and h.info.state == "exited"
    killed = agent.commands.run("sleep 300", background=True)
    killed.kill()
    r = killed.wait(timeout=WAIT, with_output=True)
    assert (r.exit_code, r.process.signal, r.stdout) == (None, "TERM", "")


def test_a_callback_that_raises_is_raised_by_wait(agent: Agent) -> None:
    def boom(_: str) -> None:
        raise RuntimeError("from the callback")

    h = agent.commands.run("echo x", background=True, on_stdout=boom)
    with pytest.raises(RuntimeError, match="from the callback"):
        h.wait(timeout=WAIT)


def test_a_process_timeout_kills_it(agent: Agent) -> None:
    h = agent.commands.run("sleep 300", background=True, timeout=0.3)
    p = h.wait(timeout=WAIT)
    assert p.timed_out and p.signal == "KILL"


def test_output_that_left_the_buffer_is_a_gap(agent: Agent) -> None:
    # The test server keeps 64 KiB of each process's output.
    h = agent.commands.run("head -c 200000 /dev/zero | tr '\\0' x", background=True)
    p = h.wait(timeout=WAIT)
    assert p.output_bytes == 200000 and p.output_start > 0
    items = list(h.output(offset=0))
    assert isinstance(items[0], OutputGap) and items[0] == OutputGap(0, p.output_start)
    assert assert_contiguous(items, 0) == 200000


def test_output_resumes_from_its_offset_when_the_connection_is_cut(
    server: Server, agent: Agent, proxy: CuttingProxy
) -> None:
    h = agent.commands.run("cat", background=True, stdin=True)
    with Client(proxy.url, server.token) as through_proxy:
        watched = through_proxy.agents.get(agent.id).commands.get(h.id)
        it = watched.output(offset=0, follow=True)
        h.send_stdin("first\n")
        assert next(it) == OutputChunk(0, "stdout", b"first\n")
        proxy.cut()  # the stream breaks while the reader waits for more
        h.send_stdin("second\n", eof=True)
        rest = list(it)
    assert chunks(rest) == [(6, "stdout", b"second\n")]
    assert watched.info.state == "exited"
    asked = [r for r in proxy.requests if b"/output?" in r]
    assert len(asked) == 2 and b"offset=6" in asked[1]


# --- async --------------------------------------------------------------------------------


async def test_async_stdin_output_wait(aagent: AsyncAgent) -> None:
    tag = unique("cat")
    h = await aagent.commands.run("cat", background=True, stdin=True, tag=tag)
    it = h.output(offset=0, follow=True)
    await h.send_stdin("one\n")
    first = await it.__anext__()
    assert isinstance(first, OutputChunk) and (first.offset, first.data) == (0, b"one\n")
    await h.send_stdin("two\n")
    await h.close_stdin()
    rest = [c async for c in it]
    assert chunks(rest) == [(4, "stdout", b"two\n")]
    p = await h.wait(timeout=WAIT)
    assert (p.state, p.exit_code) == ("exited", 0)
    assert (await h.refresh()).state == "exited"
    again = [c async for c in h.output(offset=2, follow=False)]
    assert b"".join(c[2] for c in chunks(again)) == b"e\ntwo\n"


async def test_async_background_callbacks_and_wait_with_output(aagent: AsyncAgent) -> None:
    out: list[str] = []
    err: list[str] = []

    async def on_stderr(text: str) -> None:
        err.append(text)

    h = await aagent.commands.run(
        "echo a; echo b >&2; echo c", background=True, on_stdout=out.append, on_stderr=on_stderr
    )
    r = await h.wait(timeout=WAIT, with_output=True)
    assert ("".join(out), "".join(err)) == ("a\nc\n", "b\n")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("a\nc\n", "b\n", 0, True)
    assert (await h.wait(timeout=WAIT)).state == "exited"


async def test_async_kill_list_get_remove(aagent: AsyncAgent) -> None:
    tag = unique("sleep")
    h = await aagent.commands.run("sleep 300", background=True, tag=tag)
    with pytest.raises(CommandTimeout):
        await h.wait(timeout=0.2)
    assert tag in {p.tag for p in await aagent.commands.list()}
    assert (await aagent.commands.get(tag)).id == h.id
    assert await h.kill("KILL") is True
    p = await h.wait(timeout=WAIT)
    assert (p.state, p.signal) == ("killed", "KILL")
    assert await h.kill() is False
    await h.remove()
    with pytest.raises(NotFound):
        await aagent.commands.get(h.id)


async def test_async_output_resumes_when_cut(
    server: Server, agent: Agent, proxy: CuttingProxy
) -> None:
    h = agent.commands.run("cat", background=True, stdin=True)
    async with AsyncClient(proxy.url, server.token) as through_proxy:
        watched = await (await through_proxy.agents.get(agent.id)).commands.get(h.id)
        it = watched.output(offset=0, follow=True)
        h.send_stdin("first\n")
        assert await it.__anext__() == OutputChunk(0, "stdout", b"first\n")
        proxy.cut()
        h.send_stdin("second\n", eof=True)
        rest = [c async for c in it]
    assert chunks(rest) == [(6, "stdout", b"second\n")]
    assert watched.info.state == "exited"
    asked = [r for r in proxy.requests if b"/output?" in r]
    assert len(asked) == 2 and b"offset=6" in asked[1]
