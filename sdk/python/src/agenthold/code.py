"""``agent.run_code`` and ``agent.code``: Python run in a Jupyter kernel in the sandbox that
keeps its variables between runs (``POST …/code``), and its contexts, one kernel each
(``…/code/contexts``).

Without a callback the server answers once, when the run has ended; with ``on_stdout``,
``on_stderr`` or ``on_result`` the answer is streamed (``?stream=true``, NDJSON) and each
piece reaches its callback as the kernel produces it. Either way the call returns the whole
:class:`Execution`, whose ``error`` holds the exception the code raised: that is the run's
outcome, not the client's failure, so it is returned rather than raised (as E2B's is).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from ._decode import decode
from ._http import AsyncTransport, SyncTransport, seg
from ._lines import NdjsonDecoder
from .errors import Unavailable, error_for
from .models import CodeContext, CodeError, Execution, Result

__all__ = [
    "Code",
    "AsyncCode",
    "CodeContexts",
    "AsyncCodeContexts",
    "ResultCallback",
    "AsyncResultCallback",
    "TextCallback",
    "AsyncTextCallback",
]

ResultCallback = Callable[[Result], Any]
AsyncResultCallback = Callable[[Result], Awaitable[Any] | Any]
TextCallback = Callable[[str], Any]
AsyncTextCallback = Callable[[str], Awaitable[Any] | Any]

#: Slack over a run's own timeout for the HTTP answer to arrive (a timed-out run is first
#: interrupted, and its kernel killed 5 s later if it ignores that).
ANSWER_SLACK = 30.0


def _body(code: str, context: str | None, timeout: float | None) -> dict[str, Any]:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, not {type(code).__name__}")
    body: dict[str, Any] = {"code": code, "language": "python"}
    if context is not None:
        if not context:
            raise ValueError("context must name a context (or be None for the default one)")
        body["context"] = context
    if timeout is not None:
        if timeout <= 0:
            raise ValueError("timeout must be above 0 seconds")
        body["timeoutMs"] = max(1, int(timeout * 1000))
    return body


def _answer_timeout(timeout: float | None) -> httpx.Timeout:
    # Code may be silent for as long as it runs: the read waits for its end.
    read = None if timeout is None else timeout + ANSWER_SLACK
    return httpx.Timeout(60.0, connect=15.0, read=read)


class _Collector:
    """Gathers a streamed run's lines into its :class:`Execution`."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.results: list[Result] = []
        self.error: CodeError | None = None
        self.done: dict[str, Any] | None = None

    def line(self, line: Any) -> tuple[str, Any] | None:
        """Takes a line; the ``(kind, value)`` to hand to a callback, if any."""
        if not isinstance(line, dict):
            return None
        if isinstance(line.get("stdout"), str):
            self.stdout.append(line["stdout"])
            return "stdout", line["stdout"]
        if isinstance(line.get("stderr"), str):
            self.stderr.append(line["stderr"])
            return "stderr", line["stderr"]
        if isinstance(line.get("result"), dict):
            result = Result(dict(line["result"]))
            self.results.append(result)
            return "result", result
        error = line.get("error")
        if isinstance(error, dict):
            # The stream's own failure has a ``code``; the code's exception has a ``name``.
            if "code" in error and "name" not in error:
                raise error_for(None, line)
            self.error = decode(CodeError, error)
            return None
        if isinstance(line.get("done"), dict):
            self.done = line["done"]
        return None

    def execution(self) -> Execution:
        if self.done is None:
            raise Unavailable("the run's output stream ended before the run did")
        return Execution(
            results=tuple(self.results),
            stdout="".join(self.stdout),
            stderr="".join(self.stderr),
            error=self.error,
            execution_count=_count(self.done.get("executionCount")),
            truncated=self.done.get("truncated") is True,
        )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CodeContexts:
    """An agent's code contexts: ``agent.code.contexts``. Each is one kernel with its own
    variables; ``default`` is the one a run without ``context`` uses, made on first use."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/code/contexts"

    def create(self) -> CodeContext:
        """Starts a new kernel (at most 16 contexts per agent: :class:`Conflict` past that)."""
        return CodeContext.from_json(self._t.json("POST", self._base, json={}))

    def list(self) -> list[CodeContext]:
        """The agent's contexts, oldest first."""
        return [CodeContext.from_json(c) for c in self._t.json("GET", self._base)]

    def restart(self, context: str | CodeContext) -> CodeContext:
        """Starts the context's kernel anew: its variables are gone."""
        path = f"{self._base}/{seg(_id(context))}/restart"
        return CodeContext.from_json(self._t.json("POST", path))

    def delete(self, context: str | CodeContext) -> None:
        """Ends the context's kernel and whatever it started."""
        self._t.request("DELETE", f"{self._base}/{seg(_id(context))}")


class AsyncCodeContexts:
    """:class:`CodeContexts` for the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/code/contexts"

    async def create(self) -> CodeContext:
        return CodeContext.from_json(await self._t.json("POST", self._base, json={}))

    async def list(self) -> list[CodeContext]:
        return [CodeContext.from_json(c) for c in await self._t.json("GET", self._base)]

    async def restart(self, context: str | CodeContext) -> CodeContext:
        path = f"{self._base}/{seg(_id(context))}/restart"
        return CodeContext.from_json(await self._t.json("POST", path))

    async def delete(self, context: str | CodeContext) -> None:
        await self._t.request("DELETE", f"{self._base}/{seg(_id(context))}")


def _id(context: str | CodeContext) -> str:
    return context.id if isinstance(context, CodeContext) else context


class Code:
    """Code of one agent: :meth:`run` (also ``agent.run_code``) and ``contexts``. Running
    code wakes a sleeping agent; its kernels end when it sleeps."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._path = f"/agents/{seg(agent_id)}/code"
        self.contexts = CodeContexts(transport, agent_id)

    def run(
        self,
        code: str,
        *,
        context: str | CodeContext | None = None,
        timeout: float | None = None,
        on_stdout: TextCallback | None = None,
        on_stderr: TextCallback | None = None,
        on_result: ResultCallback | None = None,
    ) -> Execution:
        """Runs ``code`` in the context's kernel (the agent's ``default`` one when ``None``)
        and returns its :class:`Execution` once it has ended. ``timeout`` (seconds)
        interrupts the code and ends the run with ``error.name == "TimeoutError"``; without
        it the server's exec default applies. With a callback the output streams to it as
        the kernel produces it. An image without ``python3-ipykernel`` raises
        :class:`Conflict`. All but ``code`` are keywords: E2B's second positional parameter is
        the language, which would otherwise be taken for a context."""
        body = _body(code, None if context is None else _id(context), timeout)
        if on_stdout is None and on_stderr is None and on_result is None:
            answer = self._t.json("POST", self._path, json=body, timeout=_answer_timeout(timeout))
            return Execution.from_json(answer)
        callbacks: dict[str, Callable[[Any], Any] | None] = {
            "stdout": on_stdout,
            "stderr": on_stderr,
            "result": on_result,
        }
        collector = _Collector()
        with self._t.stream(
            "POST",
            self._path,
            json=body,
            params={"stream": "true"},
            timeout=_answer_timeout(timeout),
        ) as r:
            decoder = NdjsonDecoder()
            for chunk in self._t.iter_bytes(r):
                for line in decoder.feed(chunk):
                    piece = collector.line(line)
                    callback = None if piece is None else callbacks[piece[0]]
                    if piece is not None and callback is not None:
                        callback(piece[1])
        return collector.execution()


class AsyncCode:
    """:class:`Code` for the async client; callbacks may be plain or ``async``."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._path = f"/agents/{seg(agent_id)}/code"
        self.contexts = AsyncCodeContexts(transport, agent_id)

    async def run(
        self,
        code: str,
        *,
        context: str | CodeContext | None = None,
        timeout: float | None = None,
        on_stdout: AsyncTextCallback | None = None,
        on_stderr: AsyncTextCallback | None = None,
        on_result: AsyncResultCallback | None = None,
    ) -> Execution:
        """See :meth:`Code.run`."""
        body = _body(code, None if context is None else _id(context), timeout)
        if on_stdout is None and on_stderr is None and on_result is None:
            answer = await self._t.json(
                "POST", self._path, json=body, timeout=_answer_timeout(timeout)
            )
            return Execution.from_json(answer)
        callbacks: dict[str, Callable[[Any], Any] | None] = {
            "stdout": on_stdout,
            "stderr": on_stderr,
            "result": on_result,
        }
        collector = _Collector()
        async with self._t.stream(
            "POST",
            self._path,
            json=body,
            params={"stream": "true"},
            timeout=_answer_timeout(timeout),
        ) as r:
            decoder = NdjsonDecoder()
            async for chunk in self._t.iter_bytes(r):
                for line in decoder.feed(chunk):
                    piece = collector.line(line)
                    callback = None if piece is None else callbacks[piece[0]]
                    if piece is not None and callback is not None:
                        out = callback(piece[1])
                        if inspect.isawaitable(out):
                            await out
        return collector.execution()
