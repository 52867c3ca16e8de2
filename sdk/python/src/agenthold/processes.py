"""Handles on background processes (``/api/v1/agents/{id}/processes/{pid}…``).

A background process belongs to the agent's sandbox, not to the request that started it: it
runs on after the call returns, and its output is kept by byte offset so that a reader can
come back for exactly what it has not seen. :meth:`ProcessHandle.output` does that by itself:
when the stream is cut it asks again from the offset after the last byte it delivered.
"""

from __future__ import annotations

import asyncio
import codecs
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal, overload

import httpx

from ._http import AsyncTransport, SyncTransport, is_timeout, seg
from ._lines import NdjsonDecoder
from .errors import (
    AgentholdError,
    CommandTimeout,
    InvalidRequest,
    NetworkError,
    Unavailable,
    error_for,
)
from .models import OutputChunk, OutputGap, Process, ProcessResult

__all__ = ["ProcessHandle", "AsyncProcessHandle", "Output"]

Output = OutputChunk | OutputGap
Callback = Callable[[str], Any]
AsyncCallback = Callable[[str], Awaitable[Any] | Any]

#: The longest single ``…/wait`` request; longer waits are several of them.
WAIT_SLICE = 30.0
#: How often in a row a cut output stream is resumed without a byte of progress in between.
MAX_RESUMES = 5
#: Seconds the read of a followed output stream may be silent (a quiet process is normal).
FOLLOW_READ: float | None = None


class _Cut(Exception):
    """The output stream ended before its end: resume from the last offset."""

    def __init__(self, error: AgentholdError) -> None:
        self.error = error


class _OutputState:
    """What an output reader has delivered so far; shared by the sync and async loops."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.resumes = 0
        self.exit: Process | None = None

    def lines(self, lines: list[Any]) -> Iterator[Output]:
        for line in lines:
            if not isinstance(line, dict):
                continue
            if "error" in line:
                raise _Cut(error_for(None, line))
            if "exit" in line:
                self.exit = Process.from_json(line["exit"])
                return
            if "gap" in line:
                gap = line["gap"] if isinstance(line["gap"], dict) else {}
                item: Output = OutputGap(int(gap.get("from", 0)), int(gap.get("to", 0)))
                self.offset = max(self.offset, item.end)
            else:
                item = OutputChunk.from_json(line)
                if item.end <= self.offset:
                    continue  # already delivered before a resume
                if item.offset < self.offset:
                    item = OutputChunk(
                        self.offset, item.stream, item.data[self.offset - item.offset :]
                    )
                self.offset = item.end
            self.resumes = 0
            yield item

    def cut(self, error: AgentholdError) -> float:
        """Counts a resume; the pause before it, or raises when resuming gets nowhere."""
        self.resumes += 1
        if self.resumes > MAX_RESUMES:
            raise error
        return min(0.1 * 2.0 ** (self.resumes - 1), 2.0)


class _Texts:
    """A process's output as text, stream by stream: a character cut between two chunks is
    decoded whole once its end arrives; invalid UTF-8 is replaced."""

    def __init__(self) -> None:
        utf8 = codecs.getincrementaldecoder("utf-8")
        self._decoders = {"stdout": utf8(errors="replace"), "stderr": utf8(errors="replace")}
        self.parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.gap = False

    def text(self, chunk: OutputChunk) -> str:
        return self._decoders[chunk.stream].decode(chunk.data)

    def rest(self, stream: str) -> str:
        return self._decoders[stream].decode(b"", final=True)

    def add(self, item: Output) -> None:
        if isinstance(item, OutputGap):
            self.gap = True
        else:
            self.parts[item.stream].append(self.text(item))

    def result(self, process: Process) -> ProcessResult:
        out, err = ("".join(self.parts[s]) + self.rest(s) for s in ("stdout", "stderr"))
        return ProcessResult(process, stdout=out, stderr=err, incomplete=self.gap)


def _params(offset: int, follow: bool) -> dict[str, str]:
    return {"offset": str(offset), "follow": "true" if follow else "false"}


def _output_timeout(follow: bool) -> httpx.Timeout:
    return httpx.Timeout(60.0, connect=15.0, read=FOLLOW_READ if follow else 60.0)


def _wait_params(remaining: float | None) -> dict[str, str]:
    slice_s = WAIT_SLICE if remaining is None else min(WAIT_SLICE, remaining)
    return {"timeoutMs": str(max(1, int(slice_s * 1000)))}


class _HandleBase:
    def __init__(self, agent_id: str, info: Process) -> None:
        self.agent_id = agent_id
        #: The process as last seen (refreshed by ``refresh``, ``wait`` and a finished ``output``).
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def tag(self) -> str | None:
        return self.info.tag

    @property
    def _path(self) -> str:
        return f"/agents/{seg(self.agent_id)}/processes/{seg(self.info.id)}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.info.id} {self.info.state} tag={self.info.tag!r}>"


class ProcessHandle(_HandleBase):
    """A background process of an agent."""

    def __init__(self, transport: SyncTransport, agent_id: str, info: Process) -> None:
        super().__init__(agent_id, info)
        self._t = transport
        self._follower: threading.Thread | None = None
        self._follow_error: BaseException | None = None

    def _follow(self, on_stdout: Callback | None, on_stderr: Callback | None) -> None:
        """Hands the output to the callbacks as it arrives, from a thread of its own, until the
        process ends (``run(..., background=True, on_stdout=…)``)."""

        def follow() -> None:
            texts = _Texts()
            callbacks = {"stdout": on_stdout, "stderr": on_stderr}
            try:
                for item in self.output(offset=0, follow=True):
                    callback = callbacks.get(getattr(item, "stream", ""))
                    if isinstance(item, OutputChunk) and callback is not None:
                        text = texts.text(item)
                        if text:
                            callback(text)
                for stream, callback in callbacks.items():
                    rest = texts.rest(stream)
                    if rest and callback is not None:
                        callback(rest)
            except BaseException as e:  # raised by wait()
                self._follow_error = e

        self._follower = threading.Thread(
            target=follow, name=f"agenthold-output-{self.id}", daemon=True
        )
        self._follower.start()

    def refresh(self) -> Process:
        self.info = Process.from_json(self._t.json("GET", self._path))
        return self.info

    @overload
    def wait(
        self, timeout: float | None = None, *, with_output: Literal[False] = False
    ) -> Process: ...

    @overload
    def wait(
        self, timeout: float | None = None, *, with_output: Literal[True]
    ) -> ProcessResult: ...

    def wait(
        self, timeout: float | None = None, *, with_output: bool = False
    ) -> Process | ProcessResult:
        """Waits until the process has ended and returns it (``exit_code`` or ``signal``);
        with ``with_output=True``, a :class:`ProcessResult`: the process with its ``stdout``
        and ``stderr`` as text.

        When it was started with ``on_stdout``/``on_stderr``, this also waits until the
        callbacks have had all its output (and raises what a callback raised).

        Raises :class:`CommandTimeout` (with ``process``, still running) when ``timeout``
        seconds pass first; the process goes on.
        """
        start = time.monotonic()
        process = self._wait(timeout)
        if self._follower is not None:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            self._follower.join(left)
            if self._follower.is_alive():
                raise CommandTimeout(
                    f"the output of process {self.id} was still being read after {timeout} s",
                    process=process,
                )
            if self._follow_error is not None:
                raise self._follow_error
        if not with_output:
            return process
        texts = _Texts()
        for item in self.output(offset=0, follow=False):
            texts.add(item)
        return texts.result(process)

    def _wait(self, timeout: float | None) -> Process:
        start = time.monotonic()
        while True:
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            r = self._t.request(
                "GET",
                f"{self._path}/wait",
                params=_wait_params(remaining),
                timeout=httpx.Timeout(WAIT_SLICE + 30.0, connect=15.0),
                accept=(408,),
            )
            self.info = Process.from_json(r.json())
            if r.status_code != 408:
                return self.info
            if timeout is not None and time.monotonic() - start >= timeout:
                raise CommandTimeout(
                    f"process {self.info.id} still runs after {timeout} s", process=self.info
                )

    def kill(self, signal: str | int = "TERM") -> bool:
        """Sends ``signal`` (a name such as ``TERM``, ``KILL``, ``INT``, or a number) to the
        process's whole process group. Returns ``True`` when it was sent, ``False`` when the
        process had already ended (``info`` then holds how it ended); a name that is no
        signal raises ``InvalidRequest``."""
        try:
            self._t.request("POST", f"{self._path}/signal", json={"signal": str(signal)})
        except InvalidRequest as e:
            if e.field == "signal" or self.refresh().state == "running":
                raise
            return False
        return True

    def send_stdin(self, data: str | bytes, eof: bool = False) -> int:
        """Writes ``data`` to the process's stdin (it must have been started with
        ``stdin=True``); ``eof=True`` closes its stdin afterwards. Returns the bytes written."""
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        r = self._t.request(
            "POST",
            f"{self._path}/stdin",
            params={"eof": "true"} if eof else None,
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        return int(r.json().get("written", 0))

    def close_stdin(self) -> None:
        self.send_stdin(b"", eof=True)

    def remove(self) -> None:
        """Kills the process's tree if it runs, then has the server forget it and its output."""
        self._t.request("DELETE", self._path)

    def output(self, offset: int = 0, follow: bool = True) -> Iterator[Output]:
        """The output from byte ``offset`` on: :class:`OutputChunk` pieces (with their offset,
        stream and bytes) and an :class:`OutputGap` where output has left the server's buffer.

        With ``follow`` it goes on until the process ends (then ``info`` holds the final
        process); without, it ends with the output so far. A stream that is cut (the server
        says so, or the connection breaks) is asked again from the offset after the last byte
        delivered, so nothing is lost or repeated.
        """
        state = _OutputState(offset)
        while True:
            try:
                with self._t.stream(
                    "GET",
                    f"{self._path}/output",
                    params=_params(state.offset, follow),
                    timeout=_output_timeout(follow),
                ) as r:
                    decoder = NdjsonDecoder()
                    for chunk in self._t.iter_bytes(r):
                        yield from state.lines(decoder.feed(chunk))
                        if state.exit is not None:
                            self.info = state.exit
                            return
                if not follow and not decoder.pending:
                    return
                raise _Cut(Unavailable("the output stream ended early", code="unavailable"))
            except _Cut as cut:
                time.sleep(state.cut(cut.error))
            except NetworkError as e:
                if is_timeout(e):
                    raise
                time.sleep(state.cut(e))


class AsyncProcessHandle(_HandleBase):
    """:class:`ProcessHandle` for the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str, info: Process) -> None:
        super().__init__(agent_id, info)
        self._t = transport
        self._follower: asyncio.Task[None] | None = None

    def _follow(self, on_stdout: AsyncCallback | None, on_stderr: AsyncCallback | None) -> None:
        """See :meth:`ProcessHandle._follow`: a task of its own; callbacks may be ``async``."""

        async def call(callback: AsyncCallback | None, text: str) -> None:
            if callback is not None and text:
                out = callback(text)
                if inspect.isawaitable(out):
                    await out

        async def follow() -> None:
            texts = _Texts()
            callbacks = {"stdout": on_stdout, "stderr": on_stderr}
            async for item in self.output(offset=0, follow=True):
                if isinstance(item, OutputChunk):
                    await call(callbacks[item.stream], texts.text(item))
            for stream, callback in callbacks.items():
                await call(callback, texts.rest(stream))

        self._follower = asyncio.get_running_loop().create_task(follow())

    async def refresh(self) -> Process:
        self.info = Process.from_json(await self._t.json("GET", self._path))
        return self.info

    @overload
    async def wait(
        self, timeout: float | None = None, *, with_output: Literal[False] = False
    ) -> Process: ...

    @overload
    async def wait(
        self, timeout: float | None = None, *, with_output: Literal[True]
    ) -> ProcessResult: ...

    async def wait(
        self, timeout: float | None = None, *, with_output: bool = False
    ) -> Process | ProcessResult:
        """See :meth:`ProcessHandle.wait`."""
        start = time.monotonic()
        process = await self._wait(timeout)
        if self._follower is not None:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            done, _ = await asyncio.wait({self._follower}, timeout=left)
            if not done:
                raise CommandTimeout(
                    f"the output of process {self.id} was still being read after {timeout} s",
                    process=process,
                )
            self._follower.result()  # what a callback raised
        if not with_output:
            return process
        texts = _Texts()
        async for item in self.output(offset=0, follow=False):
            texts.add(item)
        return texts.result(process)

    async def _wait(self, timeout: float | None) -> Process:
        start = time.monotonic()
        while True:
            remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            r = await self._t.request(
                "GET",
                f"{self._path}/wait",
                params=_wait_params(remaining),
                timeout=httpx.Timeout(WAIT_SLICE + 30.0, connect=15.0),
                accept=(408,),
            )
            self.info = Process.from_json(r.json())
            if r.status_code != 408:
                return self.info
            if timeout is not None and time.monotonic() - start >= timeout:
                raise CommandTimeout(
                    f"process {self.info.id} still runs after {timeout} s", process=self.info
                )

    async def kill(self, signal: str | int = "TERM") -> bool:
        """See :meth:`ProcessHandle.kill`."""
        try:
            await self._t.request("POST", f"{self._path}/signal", json={"signal": str(signal)})
        except InvalidRequest as e:
            if e.field == "signal" or (await self.refresh()).state == "running":
                raise
            return False
        return True

    async def send_stdin(self, data: str | bytes, eof: bool = False) -> int:
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        r = await self._t.request(
            "POST",
            f"{self._path}/stdin",
            params={"eof": "true"} if eof else None,
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        return int(r.json().get("written", 0))

    async def close_stdin(self) -> None:
        await self.send_stdin(b"", eof=True)

    async def remove(self) -> None:
        await self._t.request("DELETE", self._path)

    async def output(self, offset: int = 0, follow: bool = True) -> AsyncIterator[Output]:
        """See :meth:`ProcessHandle.output`."""
        state = _OutputState(offset)
        while True:
            try:
                async with self._t.stream(
                    "GET",
                    f"{self._path}/output",
                    params=_params(state.offset, follow),
                    timeout=_output_timeout(follow),
                ) as r:
                    decoder = NdjsonDecoder()
                    async for chunk in self._t.iter_bytes(r):
                        for item in state.lines(decoder.feed(chunk)):
                            yield item
                        if state.exit is not None:
                            self.info = state.exit
                            return
                if not follow and not decoder.pending:
                    return
                raise _Cut(Unavailable("the output stream ended early", code="unavailable"))
            except _Cut as cut:
                await asyncio.sleep(state.cut(cut.error))
            except NetworkError as e:
                if is_timeout(e):
                    raise
                await asyncio.sleep(state.cut(e))
