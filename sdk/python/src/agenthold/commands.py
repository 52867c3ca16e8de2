"""``agent.commands``: run commands in the sandbox, in the foreground (``POST …/exec``) or in
the background (``POST …/processes``).

A command given as a string runs under ``sh -c``; a list runs as is, with no shell. With an
``on_stdout``/``on_stderr`` callback the answer is streamed (``Accept: application/x-ndjson``)
and each piece of output reaches the callback as the sandbox sends it; without one the server
answers once, at the end, with everything.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, overload

import httpx

from ._http import AsyncTransport, SyncTransport, seg
from ._lines import NdjsonDecoder
from .errors import CommandExitError, CommandTimeout, Unavailable, error_for
from .models import CommandResult, Process, RunUser
from .processes import AsyncProcessHandle, ProcessHandle

__all__ = ["Commands", "AsyncCommands", "Command", "OutputCallback", "AsyncOutputCallback"]

Command = str | Sequence[str]
OutputCallback = Callable[[str], Any]
AsyncOutputCallback = Callable[[str], Awaitable[Any] | Any]

NDJSON = "application/x-ndjson"
#: Slack over a command's own timeout for the HTTP answer to arrive.
ANSWER_SLACK = 30.0


def argv(command: Command) -> list[str]:
    if isinstance(command, str):
        if not command.strip():
            raise ValueError("the command is empty")
        return ["sh", "-c", command]
    args = [str(a) for a in command]
    if not args or not args[0]:
        raise ValueError("the command must name a program")
    return args


def _ms(seconds: float) -> int:
    if seconds <= 0:
        raise ValueError("timeout must be above 0 seconds")
    return max(1, int(seconds * 1000))


def _body(
    command: Command,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    user: RunUser | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"command": argv(command)}
    if user is not None:
        body["user"] = user
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if timeout is not None:
        body["timeoutMs"] = _ms(timeout)
    return body


def _exec_body(
    command: Command,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    user: RunUser | None,
    stdin: str | bool | None,
) -> dict[str, Any]:
    body = _body(command, cwd, env, timeout, user)
    if isinstance(stdin, bool):
        raise TypeError("stdin=True keeps a pipe open: it needs background=True")
    if stdin is not None:
        body["stdin"] = stdin
    return body


def _process_body(
    command: Command,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    user: RunUser | None,
    stdin: str | bool | None,
    tag: str | None,
    keep_awake: bool,
) -> dict[str, Any]:
    if stdin is not None and not isinstance(stdin, bool):
        raise TypeError("a background process takes stdin=True and then handle.send_stdin()")
    body = _body(command, cwd, env, timeout, user)
    if tag is not None:
        body["tag"] = tag
    if stdin:
        body["stdin"] = True
    if keep_awake:
        body["keepAwake"] = True
    return body


def _answer_timeout(timeout: float | None) -> httpx.Timeout:
    # A command may be silent for as long as it runs: the read waits for its end.
    read = None if timeout is None else timeout + ANSWER_SLACK
    return httpx.Timeout(60.0, connect=15.0, read=read)


def _finish(result: CommandResult, check: bool) -> CommandResult:
    if result.timed_out:
        raise CommandTimeout(
            f"the command ran past its timeout and was killed after {result.duration_ms} ms",
            result=result,
        )
    if check and result.exit_code != 0:
        raise CommandExitError(result)
    return result


class _Collector:
    """Gathers a streamed exec's lines into its result, calling back for each piece."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.result: CommandResult | None = None

    def line(self, line: Any) -> tuple[str, str] | None:
        """Takes a line; the ``(stream, text)`` to hand to a callback, if any."""
        if not isinstance(line, dict):
            return None
        if "error" in line:
            raise error_for(None, line)
        if "exitCode" in line:
            self.result = CommandResult.from_json(
                line, stdout="".join(self.stdout), stderr="".join(self.stderr)
            )
            return None
        data = line.get("data")
        if not isinstance(data, str):
            return None
        stream = "stderr" if line.get("stream") == "stderr" else "stdout"
        (self.stderr if stream == "stderr" else self.stdout).append(data)
        return stream, data

    def done(self) -> CommandResult:
        if self.result is None:
            raise Unavailable("the command's output stream ended before the command did")
        return self.result


class Commands:
    """Commands of one agent. Running one wakes a sleeping agent."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._agent_id = agent_id
        self._base = f"/agents/{seg(agent_id)}"

    @overload
    def run(
        self,
        command: Command,
        *,
        background: Literal[False] = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: str | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        check: bool = False,
    ) -> CommandResult: ...

    @overload
    def run(
        self,
        command: Command,
        *,
        background: Literal[True],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: bool = False,
        tag: str | None = None,
        keep_awake: bool = False,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> ProcessHandle: ...

    def run(
        self,
        command: Command,
        *,
        background: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: str | bool | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        check: bool = False,
        tag: str | None = None,
        keep_awake: bool = False,
    ) -> CommandResult | ProcessHandle:
        """Runs ``command`` and returns its :class:`CommandResult` once it has ended.

        ``timeout`` (seconds) has the server kill the whole process group, and then raises
        :class:`CommandTimeout` (its ``result`` holds the output so far); without it the
        server's default applies. ``user="root"`` runs it as root, for an agent with
        ``allow_root`` only (else :class:`Forbidden`); ``"agent"`` or ``None``: the sandbox's
        account. ``stdin`` is text fed to the command. ``check=True`` raises
        :class:`CommandExitError` on a non-zero exit.

        With ``background=True`` it returns a :class:`ProcessHandle` at once instead: the
        process runs on by itself (``timeout`` then kills it when up; ``stdin=True`` keeps a
        pipe to its stdin; ``tag`` names it; ``keep_awake`` keeps the agent awake meanwhile).
        ``on_stdout``/``on_stderr`` then get its output as it arrives, from a thread of the
        handle's own, until it ends; ``handle.wait()`` also waits for them to have it all.
        ``handle.wait(with_output=True)`` returns its ``stdout`` and ``stderr`` too.
        """
        if background:
            body = _process_body(command, cwd, env, timeout, user, stdin, tag, keep_awake)
            info = self._t.json("POST", f"{self._base}/processes", json=body)
            handle = ProcessHandle(self._t, self._agent_id, Process.from_json(info))
            if on_stdout is not None or on_stderr is not None:
                handle._follow(on_stdout, on_stderr)
            return handle
        body = _exec_body(command, cwd, env, timeout, user, stdin)
        if on_stdout is None and on_stderr is None:
            answer = self._t.json(
                "POST", f"{self._base}/exec", json=body, timeout=_answer_timeout(timeout)
            )
            return _finish(CommandResult.from_json(answer), check)
        collector = _Collector()
        with self._t.stream(
            "POST",
            f"{self._base}/exec",
            json=body,
            headers={"Accept": NDJSON},
            timeout=_answer_timeout(timeout),
        ) as r:
            decoder = NdjsonDecoder()
            for chunk in self._t.iter_bytes(r):
                for line in decoder.feed(chunk):
                    piece = collector.line(line)
                    if piece is None:
                        continue
                    callback = on_stderr if piece[0] == "stderr" else on_stdout
                    if callback is not None:
                        callback(piece[1])
        return _finish(collector.done(), check)

    def list(self) -> list[Process]:
        """The agent's background processes, running and finished, oldest first."""
        return [Process.from_json(p) for p in self._t.json("GET", f"{self._base}/processes")]

    def get(self, id_or_tag: str) -> ProcessHandle:
        """A handle on a background process by id or tag (a tag names the running process
        with it, else the one started last)."""
        info = self._t.json("GET", f"{self._base}/processes/{seg(id_or_tag)}")
        return ProcessHandle(self._t, self._agent_id, Process.from_json(info))


class AsyncCommands:
    """:class:`Commands` for the async client; callbacks may be plain or ``async``."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._agent_id = agent_id
        self._base = f"/agents/{seg(agent_id)}"

    @overload
    async def run(
        self,
        command: Command,
        *,
        background: Literal[False] = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: str | None = None,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
        check: bool = False,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        command: Command,
        *,
        background: Literal[True],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: bool = False,
        tag: str | None = None,
        keep_awake: bool = False,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
    ) -> AsyncProcessHandle: ...

    async def run(
        self,
        command: Command,
        *,
        background: bool = False,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: RunUser | None = None,
        stdin: str | bool | None = None,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
        check: bool = False,
        tag: str | None = None,
        keep_awake: bool = False,
    ) -> CommandResult | AsyncProcessHandle:
        """See :meth:`Commands.run`; a background process's callbacks run in a task."""
        if background:
            body = _process_body(command, cwd, env, timeout, user, stdin, tag, keep_awake)
            info = await self._t.json("POST", f"{self._base}/processes", json=body)
            handle = AsyncProcessHandle(self._t, self._agent_id, Process.from_json(info))
            if on_stdout is not None or on_stderr is not None:
                handle._follow(on_stdout, on_stderr)
            return handle
        body = _exec_body(command, cwd, env, timeout, user, stdin)
        if on_stdout is None and on_stderr is None:
            answer = await self._t.json(
                "POST", f"{self._base}/exec", json=body, timeout=_answer_timeout(timeout)
            )
            return _finish(CommandResult.from_json(answer), check)
        collector = _Collector()
        async with self._t.stream(
            "POST",
            f"{self._base}/exec",
            json=body,
            headers={"Accept": NDJSON},
            timeout=_answer_timeout(timeout),
        ) as r:
            decoder = NdjsonDecoder()
            async for chunk in self._t.iter_bytes(r):
                for line in decoder.feed(chunk):
                    piece = collector.line(line)
                    if piece is None:
                        continue
                    callback = on_stderr if piece[0] == "stderr" else on_stdout
                    if callback is not None:
                        out = callback(piece[1])
                        if inspect.isawaitable(out):
                            await out
        return _finish(collector.done(), check)

    async def list(self) -> list[Process]:
        body = await self._t.json("GET", f"{self._base}/processes")
        return [Process.from_json(p) for p in body]

    async def get(self, id_or_tag: str) -> AsyncProcessHandle:
        info = await self._t.json("GET", f"{self._base}/processes/{seg(id_or_tag)}")
        return AsyncProcessHandle(self._t, self._agent_id, Process.from_json(info))
