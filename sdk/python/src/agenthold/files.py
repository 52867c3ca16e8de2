"""``agent.files``: the sandbox's files (``/api/v1/agents/{id}/fs/…``).

Paths are relative to ``/home/agent`` unless absolute. Writes and streamed reads never hold a
whole file in memory: a file object or an iterator is sent chunk by chunk (chunked transfer
encoding), and ``read(format="stream")`` hands out chunks as they arrive, so a file of any size
the server accepts (``max_file_mb``) passes through in constant memory.
"""

from __future__ import annotations

import inspect
import posixpath
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from contextlib import AsyncExitStack, ExitStack
from types import TracebackType
from typing import IO, Any, Literal, overload

import httpx

from ._http import AsyncTransport, SyncTransport, seg
from .errors import InvalidRequest, NotFound
from .models import DirEntry

__all__ = ["Files", "AsyncFiles", "FileStream", "AsyncFileStream", "WriteData", "AsyncWriteData"]

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


def _parent(path: str) -> tuple[str, str] | None:
    """The directory to list and the name to look for in it; ``None`` for the home or ``/``."""
    p = path.rstrip("/")
    if p in ("", "."):
        return None
    parent, name = posixpath.split(p)
    return (parent or ".", name) if name not in ("", ".") else None


def _missing(e: InvalidRequest | NotFound) -> bool:
    # A parent that is a file answers 400 "Not a directory"; a bad path (with "..") is 400 too
    # and must still raise.
    return isinstance(e, NotFound) or "not a directory" in e.message.lower()


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
        or not at all. Parent directories must exist (see :meth:`make_dir`)."""
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
        """Whether an entry (file, directory, link…) named ``path`` exists, by listing its
        directory (the API has no ``stat``)."""
        where = _parent(path)
        if where is None:
            return True
        try:
            return any(e.name == where[1] for e in self.list(where[0]))
        except (NotFound, InvalidRequest) as e:
            if _missing(e):
                return False
            raise


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
        where = _parent(path)
        if where is None:
            return True
        try:
            return any(e.name == where[1] for e in await self.list(where[0]))
        except (NotFound, InvalidRequest) as e:
            if _missing(e):
                return False
            raise
