"""Builds the models of :mod:`agenthold.models` from the server's JSON, field by field.

Each field is read from its camelCase name on the wire (``memory_mb`` from ``memoryMb``), the
API's one naming rule, and converted by its annotation. Reading is lenient on purpose: a field a
newer or older server lacks, or sends as another type, takes its empty value and an unknown field
is ignored, so one client works across server versions. That the fields are the wire's own is
checked against the types generated from the OpenAPI document (``_wire.py``) by the tests.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

T = TypeVar("T")

_FRACTION = re.compile(r"\.(\d+)")
_SNAKE = re.compile(r"_([a-z0-9])")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as the server writes it (``Z``, up to nanoseconds) or ``None``.

    ``datetime.fromisoformat`` of Python 3.10 takes neither ``Z`` nor more than six fraction
    digits, so both are normalised first.
    """
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def wire_name(field: str) -> str:
    """The JSON name of a model's field: ``memory_mb`` is ``memoryMb``."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), field)


def decode(cls: type[T], data: Any) -> T:
    """A ``cls`` (a dataclass of :mod:`agenthold.models`) from a JSON object, leniently."""
    obj = data if isinstance(data, dict) else {}
    values = {name: convert(obj.get(wire_name(name))) for name, convert in _readers(cls)}
    return cast(Callable[..., T], cls)(**values)


def read(hint: type[T], value: Any) -> T:
    """``value`` read as a ``hint`` (``str``, ``int``, ...), as a model's field of that type is."""
    return cast(T, _reader(hint)(value))


_Readers = tuple[tuple[str, Callable[[Any], Any]], ...]
# Each model's readers, made at its first use: the annotations are text until then.
_READERS: dict[type[Any], _Readers] = {}


def _readers(cls: type[Any]) -> _Readers:
    readers = _READERS.get(cls)
    if readers is None:
        hints = typing.get_type_hints(cls)
        readers = tuple((f.name, _reader(hints[f.name])) for f in dataclasses.fields(cls))
        _READERS[cls] = readers
    return readers


def _reader(hint: Any) -> Callable[[Any], Any]:
    """How a JSON value becomes a field of type ``hint``; a value of another type is empty."""
    if hint is Any:
        return lambda v: v  # verbatim JSON (an ACP object the server passes on as it came)
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        return _optional(inner)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        # A word a newer server added comes through as it is rather than being lost.
        return lambda v: v if isinstance(v, str) else ""
    if origin is tuple:
        item = _reader(args[0])
        return lambda v: tuple(item(x) for x in v if _is(args[0], x)) if isinstance(v, list) else ()
    if origin is dict and args[1] is Any:
        return lambda v: dict(v) if isinstance(v, dict) else {}
    if origin is dict:
        return lambda v: (
            {k: x for k, x in v.items() if isinstance(k, str) and isinstance(x, str)}
            if isinstance(v, dict)
            else {}
        )
    if hint is str:
        return lambda v: v if isinstance(v, str) else ""
    if hint is bool:
        return bool
    if hint is int:
        return lambda v: int(v) if _is_number(v) else 0
    if hint is float:
        return lambda v: float(v) if _is_number(v) else 0.0
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return lambda v: decode(hint, v)
    raise TypeError(f"no reader for {hint!r}")


def _optional(inner: Any) -> Callable[[Any], Any]:
    """``None`` for a value missing or of another type, else the value read as ``inner``."""
    if inner is datetime:
        return parse_time
    read = _reader(inner)
    return lambda v: read(v) if _is(inner, v) else None


def _is(hint: Any, v: Any) -> bool:
    """Whether the JSON value ``v`` is of the kind that ``hint`` is read from."""
    if hint is int or hint is float:
        return _is_number(v)
    if dataclasses.is_dataclass(hint):
        return isinstance(v, dict)
    return isinstance(v, typing.get_origin(hint) or hint)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
