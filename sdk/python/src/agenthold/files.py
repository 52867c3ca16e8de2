"""``agent.files``: the sandbox's files (``/api/v1/agents/{id}/fs/…``).

Paths are relative to ``/home/agent`` unless absolute. Writes and streamed reads never hold a
whole file in memory: a file object or an iterator is sent chunk by chunk (chunked transfer
encoding), and ``read(format="stream")`` hands out chunks as they arrive, so a file of any size
the server accepts (``max_file_mb``) passes through in constant memory.
"""

from __future__ import annotations

import builtins
import inspect
import json
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack
from types import TracebackType
from typing import IO, Any, Literal, overload

import httpx

from ._http import AsyncTransport, SyncTransport, seg, shut_down
from ._lines import SseDecoder
from .models import DirEntry, FileEvent, FileInfo, FileWritten

__all__ = [
    "Files",
    "AsyncFiles",
    "FileStream",
    "AsyncFileStream",
    "WatchHandle",
    "AsyncWatchHandle",
    "WriteData",
    "AsyncWriteData",
    "FilesToWrite",
]

#: Size of the pieces a file object is read and sent in.
CHUNK = 1 << 20

WriteData = str | bytes | bytearray | memoryview | IO[bytes] | Iterable[bytes]
AsyncWriteData = WriteData | AsyncIterable[bytes]
ReadFormat = Literal["text", "bytes", "stream"]

#: A transfer may be slow but should not stall: each read or write of it gets this long.
TRANSFER_TIMEOUT = httpx.Timeout(300.0, connect=15.0)


def _as_bytes(piece: Any) -> bytes:
    if isinstance(piece, str):
        return piece.encode("utf-8")
    if isinstance(piece, (bytes, bytearray, memoryview)):
        return bytes(piece)
    raise TypeError(f"file data must be str or bytes, not {type(piece).__name__}")


def _file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        piece = f.read(CHUNK)
        if not piece:
            return
        yield _as_bytes(piece)


def _sync_body(data: WriteData) -> bytes | Iterator[bytes]:
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return _as_bytes(data)
    if hasattr(data, "read"):
        return _file_chunks(data)  # type: ignore[arg-type]
    if isinstance(data, Iterable):
        return (_as_bytes(p) for p in data)
    raise TypeError(f"cannot write {type(data).__name__}: give str, bytes, a file or an iterator")


async def _async_chunks(data: Any) -> AsyncIterator[bytes]:
    if hasattr(data, "read"):
        while True:
            piece = data.read(CHUNK)
            if inspect.isawaitable(piece):
                piece = await piece
            if not piece:
                return
            yield _as_bytes(piece)
    elif isinstance(data, AsyncIterable):
        async for piece in data:
            yield _as_bytes(piece)
    else:
        for piece in data:
            yield _as_bytes(piece)


def _async_body(data: AsyncWriteData) -> bytes | AsyncIterator[bytes]:
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return _as_bytes(data)
    if hasattr(data, "read") or isinstance(data, (AsyncIterable, Iterable)):
        return _async_chunks(data)
    raise TypeError(f"cannot write {type(data).__name__}: give str, bytes, a file or an iterator")


#: What ``write_files`` takes: ``{path: data}``, or ``(path, data)`` pairs, or dicts with
#: ``path`` and ``data`` (E2B's shape); data is ``str`` (as UTF-8), bytes or a binary file.
FilesToWrite = (
    Mapping[str, "str | bytes | IO[bytes]"]
    | Iterable["tuple[str, str | bytes | IO[bytes]] | Mapping[str, Any]"]
)


def _multipart(files: FilesToWrite) -> list[tuple[str, tuple[str, Any, str]]]:
    """The parts of a ``write_files`` body: each a file whose ``filename`` is its path. File
    objects are streamed by httpx; str and bytes go as they are."""
    items: Iterable[Any] = files.items() if isinstance(files, Mapping) else files
    parts = []
    for item in items:
        if isinstance(item, Mapping):
            path, data = item["path"], item["data"]
        else:
            path, data = item
        if not isinstance(path, str) or not path:
            raise ValueError(f"a file's path must be a non-empty str, not {path!r}")
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        elif not isinstance(data, bytes) and not hasattr(data, "read"):
            kind = type(data).__name__
            raise TypeError(f"{path}: file data must be str, bytes or a file, not {kind}")
        parts.append(("file", (path, data, "application/octet-stream")))
    return parts


SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
#: No read timeout on a watch: the server sends a keep-alive every 15 s, and a directory may
#: well stay quiet for hours.
WATCH_TIMEOUT = httpx.Timeout(None, connect=15.0)


def _watch_params(path: str, recursive: bool) -> dict[str, str]:
    return {"path": path, "recursive": "true" if recursive else "false"}


def _event(data: str) -> FileEvent | None:
    try:
        return FileEvent.from_json(json.loads(data))
    except ValueError:
        return None


class WatchHandle:
    """The changes under a directory (``files.watch_dir``): iterate for
    :class:`~agenthold.models.FileEvent` values. ``close()`` ends it, from any thread (an
    iteration blocked waiting for the next event then simply ends), as does leaving a ``with``
    block. The iteration also ends when the directory is removed or the agent stops."""

    def __init__(self, stack: ExitStack, response: httpx.Response) -> None:
        self._stack = stack
        self._response = response
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[FileEvent]:
        decoder = SseDecoder()
        try:
            for chunk in SyncTransport.iter_bytes(self._response):
                for msg in decoder.feed(chunk):
                    event = _event(msg.data)
                    if event is not None:
                        yield event
        except Exception:
            if not self._closed.is_set():
                raise
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._stack.close()

    def close(self) -> None:
        """Stops the watch; safe to call from another thread, and more than once."""
        if self._closed.is_set():
            return
        self._closed.set()
        shut_down(self._response)
        # The reading thread (if any) lets go of the connection; without one, it is let go here.
        if self._lock.acquire(blocking=False):
            try:
                self._stack.close()
            finally:
                self._lock.release()

    def __enter__(self) -> WatchHandle:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncWatchHandle:
    """:class:`WatchHandle` for the async client: ``async for`` its events; ``await
    aclose()`` (from any task) or leaving ``async with`` ends it."""

    def __init__(self, stack: AsyncExitStack, response: httpx.Response) -> None:
        self._stack = stack
        self._response = response
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[FileEvent]:
        decoder = SseDecoder()
        try:
            async for chunk in AsyncTransport.iter_bytes(self._response):
                for msg in decoder.feed(chunk):
                    event = _event(msg.data)
                    if event is not None:
                        yield event
        except Exception:
            if not self._closed:
                raise
        finally:
            if self._closed:
                await self._stack.aclose()

    async def aclose(self) -> None:
        """Stops the watch; safe to call from another task, and more than once."""
        if self._closed:
            return
        self._closed = True
        shut_down(self._response)
        await self._stack.aclose()

    async def __aenter__(self) -> AsyncWatchHandle:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class FileStream:
    """A file being read: iterate for its chunks (bytes). Close it (or use ``with``) when
    stopping early, so the connection is let go."""

    def __init__(self, stack: ExitStack, response: httpx.Response) -> None:
        self._stack = stack
        self._response = response
        length = response.headers.get("content-length")
        #: The file's size as the server announced it, when it did.
        self.size: int | None = int(length) if length and length.isdigit() else None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from SyncTransport.iter_bytes(self._response)
        finally:
            self.close()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> FileStream:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncFileStream:
    """:class:`FileStream` for the async client: ``async for`` its chunks."""

    def __init__(self, stack: AsyncExitStack, response: httpx.Response) -> None:
        self._stack = stack
        self._response = response
        length = response.headers.get("content-length")
        self.size: int | None = int(length) if length and length.isdigit() else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in AsyncTransport.iter_bytes(self._response):
                yield chunk
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> AsyncFileStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Files:
    """The files of one agent's sandbox. File operations need a running agent (``Conflict``
    otherwise): they do not wake a sleeping one."""

    def __init__(self, transport: SyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/fs"

    def write(self, path: str, data: WriteData) -> None:
        """Replaces (or makes) the file at ``path`` with ``data``: ``str`` (as UTF-8), bytes, a
        binary file object or an iterator of bytes (both streamed). The file is replaced whole
        or not at all. Missing parent directories are made (as the agent's account)."""
        self._t.request(
            "PUT",
            f"{self._base}/write",
            params={"path": path},
            content=_sync_body(data),
            headers={"Content-Type": "application/octet-stream"},
            timeout=TRANSFER_TIMEOUT,
        )

    @overload
    def read(self, path: str, format: Literal["text"] = "text") -> str: ...
    @overload
    def read(self, path: str, format: Literal["bytes"]) -> bytes: ...
    @overload
    def read(self, path: str, format: Literal["stream"]) -> FileStream: ...

    def read(self, path: str, format: ReadFormat = "text") -> str | bytes | FileStream:
        """The file's content: ``text`` (UTF-8; a file that is not raises ``UnicodeDecodeError``),
        ``bytes``, or ``stream`` (a :class:`FileStream` of chunks, for large files)."""
        if format not in ("text", "bytes", "stream"):
            raise ValueError(f"format must be text, bytes or stream, not {format!r}")
        stack = ExitStack()
        try:
            response = stack.enter_context(
                self._t.stream(
                    "GET", f"{self._base}/read", params={"path": path}, timeout=TRANSFER_TIMEOUT
                )
            )
        except BaseException:
            stack.close()
            raise
        stream = FileStream(stack, response)
        if format == "stream":
            return stream
        data = b"".join(stream)
        return data.decode("utf-8") if format == "text" else data

    def list(self, path: str = ".") -> list[DirEntry]:
        """The entries of the directory ``path`` (without ``.`` and ``..``)."""
        body = self._t.json("GET", f"{self._base}/list", params={"path": path})
        return [DirEntry.from_json(e) for e in body or []]

    def make_dir(self, path: str) -> None:
        """Makes the directory ``path`` and its parents; one that exists is fine."""
        self._t.request("POST", f"{self._base}/mkdir", params={"path": path})

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, or a directory (``recursive=True`` for one that is not empty)."""
        params = {"path": path, "recursive": "true" if recursive else "false"}
        self._t.request("DELETE", f"{self._base}/remove", params=params)

    def exists(self, path: str) -> bool:
        """Whether the agent's account can see an entry (file, directory, link…) at ``path``:
        ``False`` for a missing path, one outside the home where only the home is served, or
        one behind a link out of the home. A malformed path (``..``) raises ``InvalidRequest``."""
        return bool(self._t.json("GET", f"{self._base}/exists", params={"path": path})["exists"])

    def stat(self, path: str) -> FileInfo:
        """What ``path`` is: type, size, mode (``"0644"``), mtime and owner. A symbolic link is
        described itself. ``NotFound`` when it is missing."""
        return FileInfo.from_json(self._t.json("GET", f"{self._base}/stat", params={"path": path}))

    def rename(self, old_path: str, new_path: str, *, overwrite: bool = False) -> None:
        """Moves or renames a file or directory. An existing ``new_path`` raises ``Conflict``
        unless ``overwrite``; its directory must exist."""
        body = {"from": old_path, "to": new_path, "overwrite": overwrite}
        self._t.request("POST", f"{self._base}/rename", json=body)

    #: E2B's name for :meth:`rename`.
    move = rename

    def write_files(self, files: FilesToWrite) -> builtins.list[FileWritten]:
        """Writes several files in one request (``multipart/form-data``, file objects streamed):
        ``{path: data}``, ``(path, data)`` pairs or ``{"path", "data"}`` dicts. Each file is
        written whole or not at all, parents made; one that fails does not stop the others.
        Returns one :class:`~agenthold.models.FileWritten` per file, in order: check ``ok``."""
        body = self._t.json(
            "POST",
            f"{self._base}/write-files",
            files=_multipart(files),
            timeout=TRANSFER_TIMEOUT,
        )
        return [FileWritten.from_json(f) for f in (body or {}).get("files", [])]

    def watch_dir(self, path: str, recursive: bool = False) -> WatchHandle:
        """Follows the changes under the directory ``path`` (its subdirectories too with
        ``recursive``) as the agent's account sees them: iterate the handle for
        :class:`~agenthold.models.FileEvent` values, ``close()`` it when done. Errors (no such
        directory, a path that is not one) raise here."""
        stack = ExitStack()
        try:
            response = stack.enter_context(
                self._t.stream(
                    "GET",
                    f"{self._base}/watch",
                    params=_watch_params(path, recursive),
                    headers=SSE_HEADERS,
                    timeout=WATCH_TIMEOUT,
                )
            )
        except BaseException:
            stack.close()
            raise
        return WatchHandle(stack, response)


class AsyncFiles:
    """:class:`Files` for the async client."""

    def __init__(self, transport: AsyncTransport, agent_id: str) -> None:
        self._t = transport
        self._base = f"/agents/{seg(agent_id)}/fs"

    async def write(self, path: str, data: AsyncWriteData) -> None:
        """See :meth:`Files.write`; an async iterator of bytes is accepted too."""
        await self._t.request(
            "PUT",
            f"{self._base}/write",
            params={"path": path},
            content=_async_body(data),
            headers={"Content-Type": "application/octet-stream"},
            timeout=TRANSFER_TIMEOUT,
        )

    @overload
    async def read(self, path: str, format: Literal["text"] = "text") -> str: ...
    @overload
    async def read(self, path: str, format: Literal["bytes"]) -> bytes: ...
    @overload
    async def read(self, path: str, format: Literal["stream"]) -> AsyncFileStream: ...

    async def read(self, path: str, format: ReadFormat = "text") -> str | bytes | AsyncFileStream:
        """See :meth:`Files.read`; ``stream`` gives an :class:`AsyncFileStream`."""
        if format not in ("text", "bytes", "stream"):
            raise ValueError(f"format must be text, bytes or stream, not {format!r}")
        stack = AsyncExitStack()
        try:
            response = await stack.enter_async_context(
                self._t.stream(
                    "GET", f"{self._base}/read", params={"path": path}, timeout=TRANSFER_TIMEOUT
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        stream = AsyncFileStream(stack, response)
        if format == "stream":
            return stream
        data = b"".join([chunk async for chunk in stream])
        return data.decode("utf-8") if format == "text" else data

    async def list(self, path: str = ".") -> list[DirEntry]:
        body = await self._t.json("GET", f"{self._base}/list", params={"path": path})
        return [DirEntry.from_json(e) for e in body or []]

    async def make_dir(self, path: str) -> None:
        await self._t.request("POST", f"{self._base}/mkdir", params={"path": path})

    async def remove(self, path: str, recursive: bool = False) -> None:
        params = {"path": path, "recursive": "true" if recursive else "false"}
        await self._t.request("DELETE", f"{self._base}/remove", params=params)

    async def exists(self, path: str) -> bool:
        """See :meth:`Files.exists`."""
        body = await self._t.json("GET", f"{self._base}/exists", params={"path": path})
        return bool(body["exists"])

    async def stat(self, path: str) -> FileInfo:
        """See :meth:`Files.stat`."""
        body = await self._t.json("GET", f"{self._base}/stat", params={"path": path})
        return FileInfo.from_json(body)

    async def rename(self, old_path: str, new_path: str, *, overwrite: bool = False) -> None:
        """See :meth:`Files.rename`."""
        body = {"from": old_path, "to": new_path, "overwrite": overwrite}
        await self._t.request("POST", f"{self._base}/rename", json=body)

    move = rename

    async def write_files(self, files: FilesToWrite) -> builtins.list[FileWritten]:
        """See :meth:`Files.write_files` (file objects must be synchronous ones)."""
        body = await self._t.json(
            "POST",
            f"{self._base}/write-files",
            files=_multipart(files),
            timeout=TRANSFER_TIMEOUT,
        )
        return [FileWritten.from_json(f) for f in (body or {}).get("files", [])]

    async def watch_dir(self, path: str, recursive: bool = False) -> AsyncWatchHandle:
        """See :meth:`Files.watch_dir`: ``async for`` the handle, ``await aclose()`` it."""
        stack = AsyncExitStack()
        try:
            response = await stack.enter_async_context(
                self._t.stream(
                    "GET",
                    f"{self._base}/watch",
                    params=_watch_params(path, recursive),
                    headers=SSE_HEADERS,
                    timeout=WATCH_TIMEOUT,
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        return AsyncWatchHandle(stack, response)
