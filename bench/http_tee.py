"""Stand between the ask-user MCP server and the app; stamp each HTTP request and response.

``python http_tee.py OUT LISTEN_PORT TARGET_PORT`` accepts connections on 127.0.0.1:LISTEN_PORT
and relays each, byte for byte, to 127.0.0.1:TARGET_PORT. Point the app's
``INTERNAL_BASE_URL`` (the MCP server's ``apiUrl``) here and the relay's calls pass through.
For every chunk that starts a request (``GET``/``POST`` …) it appends to ``OUT`` a JSON line
``{"kind": "request", "conn": …, "target": "/api/…?…", "ns": …}`` and for every chunk that
starts a response ``{"kind": "response", "conn": …, "status": …, "ns": …}``, stamped
(CLOCK_MONOTONIC) when the chunk was read, before it is passed on. A request split over
several chunks is stamped by its first: the moment it began to reach the app.

It adds one loopback hop each way (and a thread's wake-up, at normal priority) to the
calls it sees, so a benchmark switches it on only to split its figures, not for its headline.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import sys
import threading
import time
from typing import IO, Any

CHUNK = 64 * 1024
METHODS = (b"GET ", b"POST ", b"PUT ", b"PATCH ", b"DELETE ", b"HEAD ")


class Recorder:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()


def _pipe(source: socket.socket, target: socket.socket, conn: int, upstream: bool, rec: Recorder) -> None:
    """Forward ``source`` to ``target``; note each chunk that starts a request or a response."""
    try:
        while data := source.recv(CHUNK):
            ts = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            target.sendall(data)
            if upstream and data.startswith(METHODS):
                target_path = data.split(b"\r\n", 1)[0].split(b" ")[1].decode(errors="replace")
                rec.write({"kind": "request", "conn": conn, "target": target_path, "ns": ts})
            elif not upstream and data.startswith(b"HTTP/"):
                status = int(data.split(b" ", 2)[1])
                rec.write({"kind": "response", "conn": conn, "status": status, "ns": ts})
    except OSError:
        pass  # either side went away: the other is shut down below
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _serve(client: socket.socket, target_port: int, conn: int, rec: Recorder) -> None:
    with client, socket.create_connection(("127.0.0.1", target_port)) as upstream:
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_pipe, args=(upstream, client, conn, False, rec), daemon=True)
        back.start()
        _pipe(client, upstream, conn, True, rec)
        back.join()


def main() -> int:
    out_path, listen_port, target_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.setswitchinterval(0.0002)
    with open(out_path, "a", encoding="utf-8") as out, socket.socket() as listener:
        rec = Recorder(out)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", listen_port))
        listener.listen(64)
        for conn in itertools.count():
            client, _addr = listener.accept()
            args = (client, target_port, conn, rec)
            threading.Thread(target=_serve, args=args, daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
