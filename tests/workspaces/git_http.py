"""A private git server over HTTP for tests: git's own ``git http-backend`` behind Basic auth.

Serves the bare repositories under ``root`` at ``http://127.0.0.1:<port>/<name>.git``. Every
request must carry ``user:token`` (any user, the given token), else it answers 401 and git
asks its askpass for credentials, as it would with a real host. ``delay`` slows each request,
so a test can watch the clone's processes while it runs.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HTTP_BACKEND = Path(subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip()) / (
    "git-http-backend"
)


class GitHttpServer:
    def __init__(self, root: Path, token: str, *, delay: float = 0.0) -> None:
        self.root, self.token, self.delay = root, token, delay
        self.authorized: list[str] = []  # user names that came with the right token
        self.refused = 0
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> GitHttpServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                time.sleep(server.delay)
                user = self._user()
                if user is None:
                    server.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                server.authorized.append(user)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path, _, query = self.path.partition("?")
                env = {
                    "PATH": os.environ["PATH"],
                    "GIT_PROJECT_ROOT": str(server.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "REMOTE_USER": user,
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                }
                done = subprocess.run([str(HTTP_BACKEND)], input=body, env=env, capture_output=True)
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.decode().split("\r\n"):
                    name, _, value = line.partition(": ")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers.append((name, value))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _user(self) -> str | None:
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Basic "):
                    return None
                user, _, token = base64.b64decode(auth[6:]).decode().partition(":")
                return user if token == server.token else None

        return Handler
