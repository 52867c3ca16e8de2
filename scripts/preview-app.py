#!/usr/bin/env python3
"""A web app for trying previews: what an agent would serve inside its sandbox (issue #31).

The Docker tests of previews (tests/it/docker/previews.rs) and `agenthold bench --case previews`
copy this file into a sandbox and run it there; it also runs by hand:

    python3 scripts/preview-app.py PORT [ADDRESS]     (ADDRESS: 127.0.0.1 by default; 0.0.0.0, ::1, ::)

Python 3's standard library only. One thread per connection, HTTP/1.1 kept alive:

    GET  /            a small HTML page
    GET  /headers     the request's path and headers as JSON: {"path": …, "headers": [[name, value], …]}
                      (a POST too, after reading its body)
    GET  /bytes?n=N   N bytes, streamed with a Content-Length: byte i is i % 251, so a receiver can
                      check them as they come without keeping them
    POST /upload      reads the body (Content-Length or chunked) and answers
                      {"length": N, "sha256": HEX}
    GET  /ws          a WebSocket echo (RFC 6455 by hand): text and binary messages (fragmented
                      ones too) come back as they were sent, a ping gets its pong, a close its close
"""

import base64
import hashlib
import json
import socket
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# 251 is prime and 251 * 4096 is about 1 MiB: whole periods of the pattern, so each block
# continues where the last one ended.
PERIOD = 251
BLOCK = bytes(range(PERIOD)) * 4096
PAGE = (
    b"<!doctype html><html><head><meta charset=\"utf-8\"><title>preview app</title></head>"
    b"<body><h1>Hello from the preview app</h1><p id=\"ok\">served inside the sandbox</p>"
    b"</body></html>"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "preview-app"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer_json(self, value, status=200):
        self.answer(status, json.dumps(value).encode(), "application/json")

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path == "/":
            self.answer(200, PAGE, "text/html; charset=utf-8")
        elif url.path == "/headers":
            self.seen()
        elif url.path == "/bytes":
            self.send_bytes(url.query)
        elif url.path == "/ws":
            self.websocket()
        else:
            self.answer(404, b"not found\n", "text/plain")

    def do_POST(self):
        path = urlsplit(self.path).path
        if path == "/upload":
            digest = hashlib.sha256()
            length = self.read_body(digest.update)
            self.answer_json({"length": length, "sha256": digest.hexdigest()})
        elif path == "/headers":
            self.read_body(lambda _: None)
            self.seen()
        else:
            self.read_body(lambda _: None)
            self.answer(404, b"not found\n", "text/plain")

    def seen(self):
        self.answer_json({"path": self.path, "headers": [[k, v] for k, v in self.headers.items()]})

    def send_bytes(self, query):
        try:
            n = int(parse_qs(query).get("n", ["0"])[0])
        except ValueError:
            n = -1
        if n < 0:
            self.answer(400, b"n must be a number of bytes\n", "text/plain")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        view = memoryview(BLOCK)
        left = n
        try:
            while left > 0:
                k = min(left, len(BLOCK))
                self.wfile.write(view[:k])
                left -= k
        except OSError:
            # The client (or the preview) went away: this connection is over.
            self.close_connection = True

    def read_body(self, take):
        """Reads the request's body into `take`, piece by piece; returns its length."""
        total = 0
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size_line = self.rfile.readline(1024)
                if not size_line:
                    raise ConnectionError("the body ended inside a chunk header")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    # Trailers, up to the empty line.
                    while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                        pass
                    return total
                total += self.read_exactly(size, take)
                self.rfile.readline(8)
        return self.read_exactly(int(self.headers.get("Content-Length") or 0), take)

    def read_exactly(self, n, take):
        left = n
        while left > 0:
            piece = self.rfile.read(min(left, 1 << 20))
            if not piece:
                raise ConnectionError("the body ended early")
            take(piece)
            left -= len(piece)
        return n

    # WebSocket (RFC 6455), server side.

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key")
        if "websocket" not in self.headers.get("Upgrade", "").lower() or not key:
            self.answer(400, b"a WebSocket upgrade was expected\n", "text/plain")
            return
        accept = base64.b64encode(hashlib.sha1(key.strip().encode() + WS_GUID).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        try:
            self.echo()
        except (OSError, ConnectionError):
            pass

    def read_frame(self):
        head = self.rfile.read(2)
        if len(head) < 2:
            raise ConnectionError("the connection ended")
        fin, opcode = head[0] & 0x80, head[0] & 0x0F
        masked, length = head[1] & 0x80, head[1] & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self.rfile.read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self.rfile.read(8))
        mask = self.rfile.read(4) if masked else None
        payload = self.rfile.read(length)
        if len(payload) < length:
            raise ConnectionError("the connection ended inside a frame")
        if mask:
            # XOR with the key repeated, as one big integer: fast enough for megabytes.
            key = (mask * (length // 4 + 1))[:length]
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(length, "big")
        return bool(fin), opcode, bool(masked), payload

    def send_frame(self, opcode, payload):
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def echo(self):
        message, kind = b"", None
        while True:
            fin, opcode, masked, payload = self.read_frame()
            if not masked:
                # A client must mask every frame (RFC 6455 5.1): protocol error.
                self.send_frame(0x8, struct.pack("!H", 1002))
                return
            if opcode == 0x8:
                self.send_frame(0x8, payload[:2])
                return
            if opcode == 0x9:
                self.send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode in (0x1, 0x2):
                message, kind = payload, opcode
            elif opcode == 0x0 and kind is not None:
                message += payload
            else:
                self.send_frame(0x8, struct.pack("!H", 1002))
                return
            if fin:
                self.send_frame(kind, message)
                message, kind = b"", None


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients at once (the benchmark opens 100 WebSockets together).
    request_queue_size = 256


class Server6(Server):
    address_family = socket.AF_INET6


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    port = int(sys.argv[1])
    address = sys.argv[2] if len(sys.argv) == 3 else "127.0.0.1"
    server = (Server6 if ":" in address else Server)((address, port), Handler)
    print(f"preview app on {address} port {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
