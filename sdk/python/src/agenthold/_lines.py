"""Decoders for the API's two streaming formats, fed bytes as they arrive.

They do no I/O, so the sync and the async client share them: NDJSON (exec with
``Accept: application/x-ndjson``, a process's output) and Server-Sent Events (``/events``).
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from typing import Any


class NdjsonDecoder:
    """Splits a byte stream into JSON values, one per line; a partial last line waits."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        self._buf += chunk
        out: list[Any] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            line = bytes(self._buf[:nl]).strip()
            del self._buf[: nl + 1]
            if line:
                out.append(json.loads(line))

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished line are held: the stream was cut inside a line."""
        return bool(self._buf.strip())


@dataclass(frozen=True)
class SseMessage:
    event: str
    data: str
    #: The last event id the stream set (an ``id:`` field of this event or an earlier one),
    #: as the WHATWG format has it; ``None`` before any. A session's events carry their seq.
    id: str | None = None


class SseDecoder:
    """The WHATWG event-stream format: ``event:``/``data:``/``id:`` fields, a blank line
    dispatches.

    Comments (the server's keep-alives) and ``retry`` fields are skipped.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        # Holds a UTF-8 character cut between two chunks until it is whole.
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # A CR that ended a chunk may be the first half of a CRLF.
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[SseMessage]:
        text = self._utf8.decode(chunk)
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        self._buf += text
        out: list[SseMessage] = []
        lines = self._buf.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buf = lines.pop()
        for line in lines:
            msg = self._line(line)
            if msg is not None:
                out.append(msg)
        return out

    def _line(self, line: str) -> SseMessage | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            msg = SseMessage(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return msg
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None
