"""The run sandbox's egress (``promptmgr.egress``): the real proxy process on a real unix
socket, and commands in a real run sandbox reaching the network through it."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import ipaddress
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from promptmgr import egress, run_sandbox, sandbox
from promptmgr.cli import child_path
from promptmgr.settings import envnetworks
from tests.helpers import wait_until

pytestmark = pytest.mark.unit

# A loopback address of its own stands for a host on the internet: the tests open it with
# the operator's allow list, so 127.0.0.1 (where Redis and the app listen) stays closed.
OUTSIDE = "127.0.0.2"
OUTSIDE_NETWORK = f"{OUTSIDE}/32"


SLOW_SECONDS = 1.5
DRIP_PIECES = 8
DRIP_GAP = 0.15


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with what it received: its request line and headers (``/slow``
    after ``SLOW_SECONDS``)."""

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.startswith("/drip"):
            # A download that takes longer than the proxy's idle limit (patched short),
            # though each piece comes well within it.
            self.send_response(200)
            self.end_headers()
            for piece in range(DRIP_PIECES):
                self.wfile.write(f"piece {piece}\n".encode())
                self.wfile.flush()
                time.sleep(DRIP_GAP)
            return
        if self.path.startswith("/slow"):
            time.sleep(SLOW_SECONDS)
        body = f"{self.requestline}\n{self.headers}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass


class RecordingServer(http.server.ThreadingHTTPServer):
    """Notes whoever connects (``peers``)."""

    def __init__(self, host: str) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), Recorder)
        self.peers: list[str] = []

    def process_request(self, request: Any, client_address: Any) -> None:
        self.peers.append(str(client_address))
        super().process_request(request, client_address)


def serve(host: str) -> Iterator[tuple[int, list[str]]]:
    server = RecordingServer(host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1]), server.peers
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def outside_server() -> Iterator[tuple[int, list[str]]]:
    """A web server standing for a public host (see ``OUTSIDE``), with who connected."""
    yield from serve(OUTSIDE)


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[str]]]:
    """A web server on the host's loopback, where Redis and the app listen."""
    yield from serve("127.0.0.1")


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The real egress process on a unix socket, with ``OUTSIDE`` opened."""
    path = tmp_path / "egress.sock"
    process = run_sandbox.start_egress(path, allow=(OUTSIDE_NETWORK,))
    yield str(path), process
    run_sandbox._end_egress(process)


@contextlib.contextmanager
def connected(socket_path: str) -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(socket_path)
        yield client


def ask(client: socket.socket, request: bytes, *, half_close: bool = True) -> bytes:
    """Send ``request`` (then EOF, with ``half_close``) and read until the proxy closes."""
    client.sendall(request)
    if half_close:
        client.shutdown(socket.SHUT_WR)
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def exchange(socket_path: str, request: bytes, *, half_close: bool = True) -> bytes:
    with connected(socket_path) as client:
        return ask(client, request, half_close=half_close)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.9.9.9",
        "0.0.0.0",
        "10.1.2.3",
        "172.20.0.5",
        "192.168.1.10",
        "100.64.0.1",
        "169.254.169.254",
        "224.0.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b:1::a00:1",  # local-use NAT64 of 10.0.0.1
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "fd00::1",
        "fe80::1",
    ],
)
def test_this_server_and_private_networks_are_closed(address: str) -> None:
    assert egress.closed(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["151.101.0.223", "203.0.113.80", "2a04:4e42::223", "64:ff9b::9765:df"])
def test_other_addresses_are_open(address: str) -> None:
    assert not egress.closed(ipaddress.ip_address(address))


def test_an_operator_can_open_a_private_network() -> None:
    allow = egress.parse_networks(["10.20.0.0/16"])
    assert egress.Rules(allow=allow).open_to(ipaddress.ip_address("10.20.3.4"))
    assert not egress.Rules(allow=allow).open_to(ipaddress.ip_address("10.21.3.4"))


def test_a_bad_network_setting_fails_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_SANDBOX_EGRESS_ALLOW", "10.0.0.0/8, registry.internal")
    with pytest.raises(ImproperlyConfigured, match="CLAUDE_SANDBOX_EGRESS_ALLOW must list IP networks"):
        envnetworks("CLAUDE_SANDBOX_EGRESS_ALLOW")
    monkeypatch.setenv("CLAUDE_SANDBOX_EGRESS_ALLOW", "10.0.0.0/8, fd00::/8")
    assert envnetworks("CLAUDE_SANDBOX_EGRESS_ALLOW") == ("10.0.0.0/8", "fd00::/8")


def test_a_tunnel_to_an_open_host_carries_bytes_both_ways(
    proxy: tuple[str, subprocess.Popen[bytes]], outside_server: tuple[int, list[str]]
) -> None:
    port, peers = outside_server
    request = f"CONNECT {OUTSIDE}:{port} HTTP/1.1\r\nHost: {OUTSIDE}:{port}\r\n\r\n"
    request += f"GET /through HTTP/1.1\r\nHost: {OUTSIDE}\r\nConnection: close\r\n\r\n"
    received = exchange(proxy[0], request.encode()).decode()
    assert received.startswith("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200 OK"), received
    assert received.endswith(f"GET /through HTTP/1.1\nHost: {OUTSIDE}\nConnection: close\n\n")
    assert len(peers) == 1


def test_a_plain_http_request_is_forwarded_in_origin_form_without_the_proxys_headers(
    proxy: tuple[str, subprocess.Popen[bytes]], outside_server: tuple[int, list[str]]
) -> None:
    port, _peers = outside_server
    request = (
        f"GET http://user@{OUTSIDE}:{port}/simple/pkg?x=1 HTTP/1.1\r\nHost: elsewhere.example\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
        "Connection: X-Hop\r\nX-Hop: 1\r\nAccept: */*\r\n\r\n"
    )
    received = exchange(proxy[0], request.encode()).decode()
    head, echoed = received.split("\r\n\r\n", 1)
    # The client is told to open a new connection (and so get a new check) for its next request.
    assert head.startswith("HTTP/1.0 200 OK\r\n") and head.endswith("\r\nConnection: close"), head
    assert echoed == (
        f"GET /simple/pkg?x=1 HTTP/1.1\nHost: {OUTSIDE}:{port}\nAccept: */*\nConnection: close\n\n"
    )


def test_a_client_that_never_closes_gets_the_reply_and_holds_nothing_open_after_it(
    proxy: tuple[str, subprocess.Popen[bytes]], outside_server: tuple[int, list[str]]
) -> None:
    socket_path, process = proxy
    port, _peers = outside_server

    def open_files() -> int:
        return len(os.listdir(f"/proc/{process.pid}/fd"))

    # A first, ordinary exchange brings the proxy to its working state, which it keeps once
    # it has closed that exchange's connections.
    exchange(socket_path, f"GET http://{OUTSIDE}:{port}/warm HTTP/1.1\r\n\r\n".encode())
    counts = [open_files()]
    while len(counts) < 2 or counts[-1] != counts[-2]:
        time.sleep(0.2)
        counts.append(open_files())
    at_rest = counts[-1]
    with connected(socket_path) as client:
        request = f"GET http://{OUTSIDE}:{port}/kept HTTP/1.1\r\nHost: {OUTSIDE}\r\n\r\n"
        received = ask(client, request.encode(), half_close=False)
        assert received.startswith(b"HTTP/1.0 200 OK"), received
        # The client still holds its end; the proxy has let go of both of its own.
        wait_until(lambda: open_files() == at_rest, timeout=5, what="the proxy to close the connection")


def test_a_plain_http_requests_body_reaches_the_destination(
    proxy: tuple[str, subprocess.Popen[bytes]], outside_server: tuple[int, list[str]]
) -> None:
    port, _peers = outside_server
    request = f"POST http://{OUTSIDE}:{port}/upload HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    # The client waits for the reply, sending nothing more (no EOF to end the body).
    received = exchange(proxy[0], request.encode(), half_close=False)
    assert received.startswith(b"HTTP/1.0 200 OK"), received
    assert received.endswith(b"\r\n\r\nhello"), received


def test_a_client_that_sends_nothing_while_it_downloads_gets_the_whole_download(
    outside_server: tuple[int, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _peers = outside_server
    monkeypatch.setattr(egress, "IDLE_TIMEOUT", DRIP_GAP * 3)
    path = str(tmp_path / "in-process.sock")

    async def download() -> bytes:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()
        rules = egress.Rules(allow=(ipaddress.ip_network(OUTSIDE_NETWORK),))
        server = await egress.open_server(listener, rules)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"CONNECT {OUTSIDE}:{port} HTTP/1.1\r\n\r\nGET /drip HTTP/1.1\r\n\r\n".encode())
        received = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        server.close()
        return received

    received = asyncio.run(download())
    assert received.endswith(f"piece {DRIP_PIECES - 1}\n".encode()), received


def test_the_apps_services_stay_closed_in_every_ipv6_form() -> None:
    rules = egress.Rules(denied=frozenset({ipaddress.ip_address("93.184.215.14")}))
    assert rules.open_to(ipaddress.ip_address("93.184.215.15"))
    for form in ("93.184.215.14", "::ffff:93.184.215.14", "64:ff9b::93.184.215.14", "::93.184.215.14"):
        assert not rules.open_to(ipaddress.ip_address(form)), form


def test_a_service_host_that_does_not_resolve_refuses_the_run(tmp_path: Path) -> None:
    process = run_sandbox.start_egress(tmp_path / "egress.sock", allow=(), deny=("db.invalid",))
    try:
        with pytest.raises(run_sandbox.RunSandboxError, match="not serving: it exited with code 1"):
            run_sandbox._wait_egress(process)
    finally:
        run_sandbox._end_egress(process)


@pytest.mark.parametrize("form", ["connect", "plain"])
def test_the_servers_loopback_is_refused_with_a_reason_and_never_connected(
    proxy: tuple[str, subprocess.Popen[bytes]], loopback_server: tuple[int, list[str]], form: str
) -> None:
    port, peers = loopback_server
    target = f"localhost:{port}"
    request = (
        f"CONNECT {target} HTTP/1.1\r\n\r\n"
        if form == "connect"
        else f"GET http://{target}/ HTTP/1.1\r\n\r\n"
    )
    received = exchange(proxy[0], request.encode()).decode()
    assert received.startswith("HTTP/1.1 403 Forbidden\r\n"), received
    assert received.endswith(egress.MSG_REFUSED.format(host="localhost") + "\n"), received
    assert peers == []


def local_address() -> str:
    """One of this host's own IPv4 addresses that is not a loopback one (its network
    interface's), from the kernel's routing table."""
    found: list[str] = []
    last = ""
    for line in Path("/proc/net/fib_trie").read_text().splitlines():
        if "|--" in line:
            last = line.split("|--")[1].strip()
        elif "/32 host LOCAL" in line and not last.startswith("127."):
            found.append(last)
    assert found, "this host has no network interface besides the loopback"
    return found[0]


@pytest.fixture
def all_interfaces_server() -> Iterator[tuple[int, list[str]]]:
    """A web server on every interface, as a server bound to 0.0.0.0 listens."""
    yield from serve("0.0.0.0")


def test_this_hosts_own_addresses_are_closed_on_every_interface(
    proxy: tuple[str, subprocess.Popen[bytes]], all_interfaces_server: tuple[int, list[str]]
) -> None:
    port, peers = all_interfaces_server
    address = local_address()
    assert egress.is_local(ipaddress.ip_address(address))
    assert not egress.is_local(ipaddress.ip_address("151.101.0.223"))
    received = exchange(proxy[0], f"CONNECT {address}:{port} HTTP/1.1\r\n\r\n".encode()).decode()
    assert received.startswith("HTTP/1.1 403 Forbidden\r\n"), received
    assert peers == []


def test_the_apps_own_services_stay_closed_even_inside_an_allowed_network(
    tmp_path: Path, outside_server: tuple[int, list[str]], loopback_server: tuple[int, list[str]]
) -> None:
    path = tmp_path / "egress.sock"
    # An operator opened the whole loopback; the app's services (here, "localhost") stay closed.
    process = run_sandbox.start_egress(path, allow=("127.0.0.0/8",), deny=("localhost",))
    try:
        run_sandbox._wait_egress(process)
        open_port, _ = outside_server
        denied_port, denied_peers = loopback_server
        opened = exchange(str(path), f"CONNECT {OUTSIDE}:{open_port} HTTP/1.1\r\n\r\n".encode())
        refused = exchange(str(path), f"CONNECT 127.0.0.1:{denied_port} HTTP/1.1\r\n\r\n".encode())
    finally:
        run_sandbox._end_egress(process)
    assert opened.startswith(b"HTTP/1.1 200 Connection established"), opened
    assert refused.startswith(b"HTTP/1.1 403 Forbidden"), refused
    assert denied_peers == []


@pytest.mark.parametrize(
    ("request_line", "detail"),
    [
        ("CONNECT nowhere HTTP/1.1", "'nowhere' is not host:port"),
        ("GET /relative HTTP/1.1", "'/relative' is not an absolute http:// URL (use CONNECT for https)"),
        ("BROKEN", "'BROKEN' is not a request line"),
    ],
)
def test_a_request_that_is_no_proxy_request_gets_400(
    proxy: tuple[str, subprocess.Popen[bytes]], request_line: str, detail: str
) -> None:
    received = exchange(proxy[0], f"{request_line}\r\n\r\n".encode()).decode()
    assert received.startswith("HTTP/1.1 400 Bad Request\r\n"), received
    assert received.endswith(egress.MSG_BAD_REQUEST.format(detail=detail) + "\n")


def test_the_proxy_ends_when_the_app_that_started_it_is_gone(
    proxy: tuple[str, subprocess.Popen[bytes]],
) -> None:
    _path, process = proxy
    assert process.poll() is None
    assert process.stdin is not None
    # What a worker's death does to the pipe it held.
    process.stdin.close()
    assert process.wait(timeout=10) == 0


# --- In a real run sandbox ---------------------------------------------------------------


@pytest.fixture
def run_scope(tmp_path: Path, settings: Any) -> Iterator[sandbox.Confinement]:
    settings.CLAUDE_SANDBOX_EGRESS_ALLOW = (OUTSIDE_NETWORK,)
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "egress"
    workdir.mkdir(parents=True)
    confinement = sandbox.run_scope_confinement(run_id=11, workdir=workdir, path=child_path())
    yield confinement
    confinement.close()


def in_sandbox(confinement: sandbox.Confinement, command: str) -> str:
    assert confinement.sandbox is not None
    done = subprocess.run(
        [confinement.sandbox.prefix, command],
        cwd=Path(settings.STORAGE_ROOT) / "worktrees" / "egress",
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": child_path(), **confinement.cli_env},
    )
    return done.stdout + done.stderr


def test_a_sandboxed_command_reaches_an_open_host_through_the_proxy_at_once(
    run_scope: sandbox.Confinement, outside_server: tuple[int, list[str]]
) -> None:
    port, peers = outside_server
    # The first command, straight after the sandbox started: the egress is listening.
    output = in_sandbox(run_scope, f"curl -sS -m 10 http://{OUTSIDE}:{port}/fetched")
    assert output.startswith("GET /fetched HTTP/1.1\n"), output
    # It came through the proxy (no route to the host otherwise).
    direct = in_sandbox(
        run_scope, f"curl -sS -m 10 --noproxy '*' http://{OUTSIDE}:{port}/direct; echo exit=$?"
    )
    assert "exit=7" in direct, direct
    assert len(peers) == 1


def test_a_sandboxed_command_never_reaches_the_servers_loopback_through_the_proxy(
    run_scope: sandbox.Confinement, loopback_server: tuple[int, list[str]]
) -> None:
    port, peers = loopback_server
    # NO_PROXY sends 127.0.0.1 to the sandbox's own loopback, where nothing listens; forced
    # through the proxy it is refused there.
    own_loopback = in_sandbox(run_scope, f"curl -sS -m 10 http://127.0.0.1:{port}/; echo exit=$?")
    forced = in_sandbox(run_scope, f"curl -sS -m 10 --noproxy '' http://127.0.0.1:{port}/")
    assert "exit=7" in own_loopback, own_loopback
    assert forced.strip() == egress.MSG_REFUSED.format(host="127.0.0.1", address="127.0.0.1"), forced
    assert peers == []


def test_a_command_that_has_sent_all_it_will_send_still_gets_a_late_reply(
    run_scope: sandbox.Confinement, outside_server: tuple[int, list[str]]
) -> None:
    port, _peers = outside_server
    request = f"CONNECT {OUTSIDE}:{port} HTTP/1.1\\r\\n\\r\\nGET /slow HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
    # socat as the client: it closes its sending side once the request is out, then waits.
    output = in_sandbox(run_scope, f"printf '{request}' | socat -t 10 - TCP:127.0.0.1:{egress.PORT}")
    assert "HTTP/1.1 200 Connection established" in output, output
    assert "HTTP/1.0 200 OK" in output and "GET /slow HTTP/1.1" in output, output


def test_a_sandboxed_command_cannot_replace_the_egress_socket(run_scope: sandbox.Confinement) -> None:
    socket_path = run_scope.tmpdir / run_sandbox.EGRESS_DIR / run_sandbox.EGRESS_SOCKET
    output = in_sandbox(run_scope, f"rm -f {socket_path}; echo exit=$?")
    assert "Read-only file system" in output, output
    assert socket_path.exists()


def test_the_egress_ends_with_the_run(run_scope: sandbox.Confinement) -> None:
    assert run_scope.sandbox is not None
    process = run_scope.sandbox.egress
    assert process is not None and process.poll() is None
    run_scope.close()
    assert process.poll() is not None
    wait_until(lambda: not os.path.exists(f"/proc/{process.pid}"), timeout=5, what="the proxy to go")


# --- A start that fails leaves nothing behind --------------------------------------------


def processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def open_fds() -> set[tuple[str, str]]:
    """This process's open descriptors, each with what it points at."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            found.add((name, os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            continue  # the listing's own descriptor, closed once listed
    return found


def test_a_sandbox_that_fails_late_in_its_start_leaves_no_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "failing"
    workdir.mkdir(parents=True)
    tmpdir = sandbox.run_tmp_open(12)
    proxies: list[subprocess.Popen[bytes]] = []
    start_egress = run_sandbox.start_egress

    def noting_the_proxy(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proxies.append(start_egress(*args, **kwargs))
        return proxies[-1]

    def no_prefix(*args: Any, **kwargs: Any) -> str:
        raise OSError("No space left on device")

    monkeypatch.setattr(run_sandbox, "start_egress", noting_the_proxy)
    # The last step of the start, once bubblewrap, its sandbox and the egress all run.
    monkeypatch.setattr(run_sandbox, "prefix_script", no_prefix)
    open_before = open_fds()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="No space left on device"):
            sandbox.start_run_sandbox(
                workdir=workdir, tmpdir=tmpdir, path=child_path(), prefix_path=run_sandbox.prefix_path(12)
            )
        assert [proxy.poll() is not None for proxy in proxies] == [True]
        assert processes_naming(str(tmpdir)) == []  # bubblewrap and its sandbox
        # Its pipes and pidfd: no descriptor open now that was not open before, by number and
        # by what it points at. Not a count: other tests' threads in this worker (an idle Redis
        # connection trimmed) may close descriptors meanwhile (one run here read 33 == 35).
        assert open_fds() - open_before == set()
    finally:
        sandbox.run_tmp_close(tmpdir)


def test_a_proxy_that_cannot_serve_refuses_the_run_with_the_reason(settings: Any) -> None:
    settings.CLAUDE_SANDBOX_EGRESS_ALLOW = ("not-a-network",)  # past the settings' own check
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "no-proxy"
    workdir.mkdir(parents=True)
    confinement = sandbox.run_scope_confinement(run_id=13, workdir=workdir, path=child_path())
    try:
        with pytest.raises(sandbox.SandboxUnavailable) as refused:
            asyncio.run(confinement.serving())
        assert "the sandbox's network proxy (promptmgr.egress) is not serving: it exited with code 1" in str(
            refused.value
        )
    finally:
        confinement.close()
    assert processes_naming(str(confinement.tmpdir)) == []


def slow_interpreter(*, seconds: int) -> str:
    """A script that starts this Python ``seconds`` late, in one process (bash's ``read``
    times out on the egress's standard input, which the app holds open and never writes)."""
    return f'#!/bin/bash\nread -r -t {seconds} _\nexec {shlex.quote(sys.executable)} "$@"\n'


def test_a_command_that_reaches_out_before_the_egress_serves_waits_for_it(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch, outside_server: tuple[int, list[str]]
) -> None:
    """The sandbox is ready before its egress (which starts beside the CLI): a command
    that connects meanwhile is held by the egress's listening socket, not refused."""
    settings.CLAUDE_SANDBOX_EGRESS_ALLOW = (OUTSIDE_NETWORK,)
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(slow_interpreter(seconds=1))
    slow_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow_python))  # the egress's interpreter
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "egress"
    workdir.mkdir(parents=True)
    port, peers = outside_server
    confinement = sandbox.run_scope_confinement(run_id=15, workdir=workdir, path=child_path())
    try:
        assert confinement.sandbox is not None
        serving = [confinement.sandbox.egress_serving]  # as the command starts
        output = in_sandbox(confinement, f"curl -sS -m 10 http://{OUTSIDE}:{port}/early")
        asyncio.run(confinement.serving())
        serving.append(confinement.sandbox.egress_serving)
    finally:
        confinement.close()
    assert serving == [False, True]
    assert output.startswith("GET /early HTTP/1.1\n"), output
    assert len(peers) == 1


def test_a_run_stopped_while_its_egress_starts_ends_the_wait_and_leaves_nothing(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(slow_interpreter(seconds=30))
    slow_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow_python))
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "stopped-egress"
    workdir.mkdir(parents=True)
    confinement = sandbox.run_scope_confinement(run_id=16, workdir=workdir, path=child_path())

    async def stop_while_it_waits() -> float:
        waiting = asyncio.ensure_future(confinement.serving())
        await asyncio.sleep(0.2)
        assert not waiting.done()
        started = time.monotonic()
        await confinement.aclose()
        with pytest.raises(sandbox.SandboxUnavailable, match="not serving: it exited with code -9"):
            await waiting
        return time.monotonic() - started

    took = asyncio.run(stop_while_it_waits())
    assert took < 5, f"the stop waited {took:.1f} s for the egress's start"
    assert processes_naming(str(confinement.tmpdir)) == []
    assert processes_naming(str(slow_python)) == []


def test_a_run_stopped_while_its_sandbox_starts_leaves_nothing_of_it(settings: Any) -> None:
    settings.CLAUDE_SANDBOX_SCOPE = "run"
    workdir = Path(settings.STORAGE_ROOT) / "worktrees" / "stopped"
    workdir.mkdir(parents=True)
    pattern = f"{sandbox._run_tmp_prefix()}14-*"

    def made() -> list[Path]:
        return list(Path(tempfile.gettempdir()).glob(pattern))

    async def stop_as_it_starts() -> None:
        starting = asyncio.ensure_future(sandbox.confine(run_id=14, workdir=workdir, path=child_path()))
        while not made():  # the thread is at work on it
            await asyncio.sleep(0.001)
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        deadline = time.monotonic() + 15
        while made() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    tmpdirs = made()
    asyncio.run(stop_as_it_starts())
    assert made() == tmpdirs == []
