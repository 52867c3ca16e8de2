"""Files: every call, every kind of data, and a 100 MiB file through in flat memory."""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import random
import resource
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator

import pytest

from agenthold import (
    Agent,
    AsyncAgent,
    AsyncFileStream,
    Conflict,
    FileEvent,
    FileInfo,
    FileStream,
    InvalidRequest,
    NotFound,
)

from .conftest import unique

MIB = 1 << 20
BIG = 100 * MIB
#: What a 100 MiB transfer may add to the test process's memory: well under its size.
MEMORY_BUDGET = 32 * MIB


def blocks(seed: int, total: int = BIG, size: int = MIB) -> Iterator[bytes]:
    """``total`` pseudo-random bytes in ``size`` pieces, made as they are asked for."""
    rng = random.Random(seed)
    for _ in range(total // size):
        yield rng.randbytes(size)


def digest(seed: int) -> str:
    h = hashlib.sha256()
    for b in blocks(seed):
        h.update(b)
    return h.hexdigest()


def max_rss() -> int:
    """The process's peak resident size so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_write_and_read_every_kind_of_data(agent: Agent) -> None:
    d = unique("files")
    agent.files.make_dir(f"{d}/sub/deeper")
    agent.files.write(f"{d}/text.txt", "héllo\n")
    agent.files.write(f"{d}/bytes.bin", b"\x00\xff")
    agent.files.write(f"{d}/file.bin", io.BytesIO(b"from a file object"))
    agent.files.write(f"{d}/iter.txt", iter([b"a", b"b", b"c"]))
    assert agent.files.read(f"{d}/text.txt") == "héllo\n"
    assert agent.files.read(f"{d}/bytes.bin", format="bytes") == b"\x00\xff"
    assert agent.files.read(f"{d}/file.bin", format="bytes") == b"from a file object"
    with agent.files.read(f"{d}/iter.txt", format="stream") as s:
        assert isinstance(s, FileStream) and s.size == 3
        assert b"".join(s) == b"abc"
    with pytest.raises(UnicodeDecodeError):
        agent.files.read(f"{d}/bytes.bin")
    # Overwriting replaces the whole file.
    agent.files.write(f"{d}/text.txt", "x")
    assert agent.files.read(f"{d}/text.txt") == "x"


def test_list_make_dir_remove_exists(agent: Agent) -> None:
    d = unique("tree")
    agent.files.make_dir(f"{d}/a/b")
    agent.files.make_dir(f"{d}/a/b")  # again: fine
    agent.files.write(f"{d}/a/f.txt", "12345")
    entries = {e.name: e for e in agent.files.list(f"{d}/a")}
    assert set(entries) == {"b", "f.txt"}
    assert entries["b"].is_dir and entries["b"].type == "dir"
    assert entries["f.txt"].type == "file" and entries["f.txt"].size == 5
    assert entries["f.txt"].mtime is not None and entries["f.txt"].mode & 0o400
    assert d in {e.name for e in agent.files.list()}  # the home by default
    assert agent.files.exists(f"{d}/a/f.txt") and agent.files.exists(f"{d}/a/b/")
    assert agent.files.exists(".") and agent.files.exists(f"/home/agent/{d}")
    assert not agent.files.exists(f"{d}/nope")
    assert not agent.files.exists(f"{d}/nope/deeper")
    assert not agent.files.exists(f"{d}/a/f.txt/under-a-file")
    with pytest.raises(InvalidRequest):
        agent.files.exists("../x")
    agent.files.remove(f"{d}/a/f.txt")
    assert not agent.files.exists(f"{d}/a/f.txt")
    with pytest.raises(Conflict):
        agent.files.remove(f"{d}/a")  # not empty: a conflict with what it holds
    agent.files.remove(d, recursive=True)
    assert not agent.files.exists(d)


def test_a_100_mib_file_streams_both_ways_in_flat_memory(agent: Agent) -> None:
    path = f"{unique('big')}.bin"
    rss_before = max_rss()
    tracemalloc.start()
    try:
        agent.files.write(path, blocks(seed=1))
        got = hashlib.sha256()
        size = 0
        with agent.files.read(path, format="stream") as stream:
            assert stream.size == BIG
            for chunk in stream:
                got.update(chunk)
                size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown = max_rss() - rss_before
    assert size == BIG and got.hexdigest() == digest(seed=1)
    assert peak < MEMORY_BUDGET, f"Python allocations peaked at {peak / MIB:.1f} MiB"
    assert grown < MEMORY_BUDGET, f"the peak RSS grew by {grown / MIB:.1f} MiB"
    agent.files.remove(path)


# --- async --------------------------------------------------------------------------------


async def ablocks(seed: int) -> AsyncIterator[bytes]:
    for b in blocks(seed):
        yield b


async def test_async_files(aagent: AsyncAgent) -> None:
    d = unique("afiles")
    await aagent.files.make_dir(f"{d}/x")
    await aagent.files.write(f"{d}/t.txt", "hé")
    await aagent.files.write(f"{d}/b.bin", bytearray(b"\x01\x02"))
    await aagent.files.write(f"{d}/f.bin", io.BytesIO(b"file"))
    await aagent.files.write(f"{d}/i.bin", [b"1", b"2"])
    assert await aagent.files.read(f"{d}/t.txt") == "hé"
    assert await aagent.files.read(f"{d}/b.bin", format="bytes") == b"\x01\x02"
    assert await aagent.files.read(f"{d}/f.bin", format="bytes") == b"file"
    stream = await aagent.files.read(f"{d}/i.bin", format="stream")
    assert isinstance(stream, AsyncFileStream)
    async with stream:
        assert b"".join([c async for c in stream]) == b"12"
    names = {e.name for e in await aagent.files.list(d)}
    assert names == {"x", "t.txt", "b.bin", "f.bin", "i.bin"}
    assert await aagent.files.exists(f"{d}/t.txt") and not await aagent.files.exists(f"{d}/no")
    await aagent.files.remove(f"{d}/t.txt")
    assert not await aagent.files.exists(f"{d}/t.txt")
    await aagent.files.remove(d, recursive=True)
    assert not await aagent.files.exists(d)


async def test_async_100_mib_file_streams_in_flat_memory(aagent: AsyncAgent) -> None:
    path = f"{unique('abig')}.bin"
    rss_before = max_rss()
    tracemalloc.start()
    try:
        await aagent.files.write(path, ablocks(seed=2))
        got = hashlib.sha256()
        size = 0
        async with await aagent.files.read(path, format="stream") as stream:
            async for chunk in stream:
                got.update(chunk)
                size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown = max_rss() - rss_before
    assert size == BIG and got.hexdigest() == digest(seed=2)
    assert peak < MEMORY_BUDGET, f"Python allocations peaked at {peak / MIB:.1f} MiB"
    assert grown < MEMORY_BUDGET, f"the peak RSS grew by {grown / MIB:.1f} MiB"
    await aagent.files.remove(path)


# --- issue 32: parents, stat, exists, rename, write_files, watch_dir ----------------------


def _next_events(it: Iterator[FileEvent], n: int) -> list[tuple[str, str]]:
    return [(e.type, e.path) for e in itertools.islice(it, n)]


def test_write_makes_parents_stat_exists_rename(agent: Agent) -> None:
    d = unique("e2b")
    agent.files.write(f"{d}/a/b/c.txt", "hello")  # no make_dir first
    assert agent.files.read(f"{d}/a/b/c.txt") == "hello"
    info = agent.files.stat(f"{d}/a/b/c.txt")
    assert isinstance(info, FileInfo)
    assert (info.type, info.size, info.mode) == ("file", 5, "0644")
    assert info.path == f"/home/agent/{d}/a/b/c.txt" and info.owner and info.mtime is not None
    assert agent.files.stat(f"{d}/a").is_dir
    with pytest.raises(NotFound):
        agent.files.stat(f"{d}/nope")
    assert agent.files.exists(f"{d}/a/b/c.txt")
    assert not agent.files.exists("/etc/passwd")  # outside the home on the fake driver
    agent.files.rename(f"{d}/a/b/c.txt", f"{d}/moved.txt")
    assert not agent.files.exists(f"{d}/a/b/c.txt") and agent.files.exists(f"{d}/moved.txt")
    agent.files.write(f"{d}/other.txt", "other")
    with pytest.raises(Conflict):
        agent.files.rename(f"{d}/other.txt", f"{d}/moved.txt")
    agent.files.move(f"{d}/other.txt", f"{d}/moved.txt", overwrite=True)
    assert agent.files.read(f"{d}/moved.txt") == "other"
    with pytest.raises(NotFound):
        agent.files.rename(f"{d}/gone", f"{d}/x")
    with pytest.raises(InvalidRequest):
        agent.files.rename("../x", f"{d}/x")


def test_write_files_reports_each_file(agent: Agent) -> None:
    d = unique("batch")
    results = agent.files.write_files(
        [
            (f"{d}/one.txt", "one"),
            {"path": f"{d}/sub/two.bin", "data": b"\x00\x01"},
            (f"{d}/three.bin", io.BytesIO(b"three")),
            ("../escape", "no"),
        ]
    )
    want = [f"{d}/one.txt", f"{d}/sub/two.bin", f"{d}/three.bin", "../escape"]
    assert [r.path for r in results] == want
    assert [r.ok for r in results] == [True, True, True, False]
    assert isinstance(results[3].error, InvalidRequest)
    assert agent.files.read(f"{d}/sub/two.bin", format="bytes") == b"\x00\x01"
    assert agent.files.read(f"{d}/three.bin") == "three"
    assert [r.ok for r in agent.files.write_files({f"{d}/m.txt": "m"})] == [True]


def test_watch_dir_sees_changes_and_closes_from_another_thread(agent: Agent) -> None:
    d = unique("watch")
    agent.files.make_dir(f"{d}/w")
    home = f"/home/agent/{d}/w"
    with agent.files.watch_dir(f"{d}/w", recursive=True) as watch:
        it = iter(watch)
        agent.commands.run(f"echo hi > {d}/w/f")
        assert _next_events(it, 2) == [("create", f"{home}/f"), ("write", f"{home}/f")]
        agent.commands.run(f"mv {d}/w/f {d}/w/g && rm {d}/w/g")
        assert _next_events(it, 3) == [
            ("rename", f"{home}/f"),
            ("create", f"{home}/g"),
            ("remove", f"{home}/g"),
        ]
        agent.commands.run(f"mkdir {d}/w/sub && touch {d}/w/sub/x")
        assert _next_events(it, 2) == [("create", f"{home}/sub"), ("create", f"{home}/sub/x")]
    with pytest.raises(NotFound):
        agent.files.watch_dir(f"{d}/nope")

    # Closed from another thread while the reader waits for an event that never comes.
    watch = agent.files.watch_dir(f"{d}/w")
    got: list[FileEvent] = []
    reader = threading.Thread(target=lambda: got.extend(watch))
    reader.start()
    watch.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and got == []


async def test_async_files_of_issue_32(aagent: AsyncAgent) -> None:
    d = unique("ae2b")
    await aagent.files.write(f"{d}/x/y.txt", "y")
    assert (await aagent.files.stat(f"{d}/x/y.txt")).size == 1
    assert await aagent.files.exists(f"{d}/x") and not await aagent.files.exists(f"{d}/z")
    await aagent.files.rename(f"{d}/x/y.txt", f"{d}/y.txt")
    assert await aagent.files.read(f"{d}/y.txt") == "y"
    results = await aagent.files.write_files({f"{d}/a.txt": "a", "../b": "b"})
    assert [r.ok for r in results] == [True, False]
    watch = await aagent.files.watch_dir(d)
    async with watch:
        events = watch.__aiter__()
        await aagent.commands.run(f"touch {d}/new")
        first = await asyncio.wait_for(events.__anext__(), 10)
        assert (first.type, first.path) == ("create", f"/home/agent/{d}/new")
    # Closed from another task while one waits.
    watch = await aagent.files.watch_dir(d)

    async def drain() -> list[FileEvent]:
        return [e async for e in watch]

    task = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await watch.aclose()
    assert await asyncio.wait_for(task, 10) == []
