"""The run sandbox's way out: an HTTP proxy (``CONNECT`` and plain HTTP) that never connects
to this server, the app's services or a private network.

Claude Code's own sandbox (the ``command`` scope) gives commands the network through a proxy
of the CLI's that refuses the server's loopback by name. The run's own sandbox (the ``run``
scope, ``promptmgr.run_sandbox``) has a loopback of its own and nothing else; this is its
egress, one process per run:

- the app binds a unix socket in the run's temporary directory (read-only inside the
  sandbox) and hands it to this process (``--fd``), so a command never finds it missing;
- inside the sandbox ``socat`` listens on ``127.0.0.1:PORT`` and passes each connection to
  that socket, and every command gets ``HTTP_PROXY``/``HTTPS_PROXY`` pointing there (what
  ``npm``, ``pip``, ``git`` and ``curl`` follow, as in the ``command`` scope);
- this process resolves each host itself and connects only to an address that is none of
  this host's own (any interface's: the app, Redis and PostgreSQL may listen on all of
  them) and in none of the ``CLOSED`` networks (the loopback, private networks, where a
  deployment's shared PostgreSQL and Redis live, link-local ones, where a cloud keeps its
  metadata service), unless it is inside one of the operator's ``--allow`` networks
  (``CLAUDE_SANDBOX_EGRESS_ALLOW``); and never to one of the app's own services
  (``--deny``: the database's, Redis's and the app's hosts, wherever they are). It
  connects to the address it checked, so a name that resolves differently a second time
  gains nothing.

It imports nothing but the standard library (it starts beside each run's CLI) and ends
when its standard input closes, which the app holds open: a worker that dies takes its
runs' proxies with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Inside the sandbox, where socat listens for the commands (the sandbox's own loopback).
PORT = 3128
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
# A connection whose destination sends nothing for this long is closed (its client may be gone).
IDLE_TIMEOUT = 600.0
# Each of the app's service hosts resolves within this, or the run does not start.
DENY_RESOLVE_TIMEOUT = 3.0
READY = "ready"
CHUNK = 64 * 1024
# Hop-by-hop headers a plain HTTP request loses on its way through (RFC 9110 7.6.1).
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}

MSG_REFUSED = (
    "PromptManager's sandbox: {host} is on this server or a private network, which sandboxed "
    "commands may not reach (an operator can open a network with CLAUDE_SANDBOX_EGRESS_ALLOW)."
)
MSG_BAD_REQUEST = "PromptManager's sandbox proxy: {detail}."
MSG_DENY_UNRESOLVED = (
    "promptmgr.egress: the app's service host {host} did not resolve ({detail}); it cannot be kept closed."
)
MSG_NO_REPLY = "PromptManager's sandbox proxy: {host} port {port} gave no usable reply ({detail})."
MSG_UNREACHABLE = "PromptManager's sandbox proxy: {host} port {port} could not be reached ({detail})."


class Refused(Exception):
    """The destination is not one a sandboxed command may reach; the message says why."""


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    """Networks written as CIDR (``10.1.2.0/24``, ``fd00::/8``); ValueError names a bad one."""
    return tuple(ipaddress.ip_network(value.strip(), strict=False) for value in values if value.strip())


# What no sandboxed command reaches unless the operator opens it: this host (the loopback,
# "this network"), private and shared networks (a deployment's PostgreSQL and Redis),
# link-local ones (a cloud's metadata service), multicast, and what is reserved.
CLOSED = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)

# IPv6 prefixes whose last 32 bits are an IPv4 address: NAT64's well-known and local-use
# prefixes, and the deprecated IPv4-compatible form.
EMBEDDING = tuple(ipaddress.ip_network(network) for network in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96"))


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, Teredo, NAT64, compatible)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in EMBEDDING):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def forms(address: Address) -> tuple[Address, ...]:
    """``address``, and the IPv4 address it carries if it is an IPv6 one that does: each is
    judged, so no IPv6 spelling of a closed or denied address gets through."""
    embedded = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    return (address,) if embedded is None else (address, embedded)


def closed(address: Address) -> bool:
    """Whether ``address`` (in any of its ``forms``) lies in one of the ``CLOSED`` networks."""
    return any(form in network for form in forms(address) for network in CLOSED)


def is_local(address: Address) -> bool:
    """Whether ``address`` is one of this host's own (any interface's, not only the
    loopback's): the kernel routes to such an address from itself, so a socket
    connected to it gets it as its own address. No packet is sent."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((str(address), 9))
            return ipaddress.ip_address(probe.getsockname()[0].partition("%")[0]) == address
    except OSError:
        return False  # no route (or no such family here): not this host's


def split_authority(authority: str) -> tuple[str, int]:
    """``host:port`` of a ``CONNECT`` target (``[v6]:port`` too); ValueError if it is not one."""
    host, sep, port = authority.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"{authority!r} is not host:port")
    host = host.removeprefix("[").removesuffix("]")
    number = int(port)
    if not 0 < number < 65536:
        raise ValueError(f"port {port} is out of range")
    return host, number


@dataclass(frozen=True)
class Rules:
    """What the proxy opens: the operator's ``allow`` networks, and never a ``denied``
    address (the app's own services, wherever they are)."""

    allow: tuple[Network, ...] = ()
    denied: frozenset[Address] = frozenset()

    def open_to(self, address: Address) -> bool:
        if any(form in self.denied for form in forms(address)):
            return False
        if any(address in network for network in self.allow):
            return True
        return not closed(address) and not any(is_local(form) for form in forms(address))


async def resolve(host: str, port: int, *, timeout: float = CONNECT_TIMEOUT) -> list[str]:
    loop = asyncio.get_running_loop()
    found = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    return [str(info[4][0]) for info in found]


def reason(exc: BaseException) -> str:
    """What went wrong, for a message (a timeout's own text is empty)."""
    return str(exc) or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__)


async def denied_addresses(hosts: Sequence[str]) -> frozenset[Address]:
    """The addresses ``hosts`` resolve to now. One that does not resolve stops the proxy
    (``SystemExit``, the run is refused): an address it could not keep closed stays closed."""
    denied: set[Address] = set()
    for host in hosts:
        try:
            found = await resolve(host, 0, timeout=DENY_RESOLVE_TIMEOUT)
        except (OSError, UnicodeError) as exc:  # TimeoutError is an OSError
            raise SystemExit(MSG_DENY_UNRESOLVED.format(host=host, detail=reason(exc))) from None
        denied.update(ipaddress.ip_address(address.partition("%")[0]) for address in found)
    return frozenset(denied)


async def open_checked(
    host: str, port: int, rules: Rules
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``host``, opened to an address the ``rules`` open (``Refused`` if it
    has none)."""
    addresses = await resolve(host, port)
    usable = [a for a in addresses if rules.open_to(ipaddress.ip_address(a.partition("%")[0]))]
    if not usable:
        raise Refused(MSG_REFUSED.format(host=host))
    failure = OSError("no address")
    for address in usable:
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
        except OSError as exc:  # TimeoutError included
            failure = exc
    raise failure


def respond(writer: asyncio.StreamWriter, status: str, message: str) -> None:
    body = (message + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def end_to_end(headers: list[str]) -> list[str]:
    """``headers`` without the hop-by-hop ones: ``HOP_HEADERS`` and those a ``Connection``
    header names (RFC 9110 7.6.1)."""
    named = {
        token.strip().lower()
        for line in headers
        if line.partition(":")[0].strip().lower() == "connection"
        for token in line.partition(":")[2].split(",")
    }
    return [line for line in headers if line.partition(":")[0].strip().lower() not in HOP_HEADERS | named]


def forwarded_head(method: str, target: str, version: str, headers: list[str]) -> tuple[str, int, bytes]:
    """Host, port and the origin-form request of a plain HTTP proxy request: its ``Host``
    the URL's (RFC 9112 3.2.2), the hop-by-hop headers dropped, ``Connection: close``."""
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"{target!r} is not an absolute http:// URL (use CONNECT for https)")
    port = url.port or 80
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    authority = url.netloc.rpartition("@")[2]
    kept = [line for line in end_to_end(headers) if line.partition(":")[0].strip().lower() != "host"]
    head = "\r\n".join(
        [f"{method} {path} {version}", f"Host: {authority}", *kept, "Connection: close", "", ""]
    )
    return url.hostname, port, head.encode("latin-1")


async def forward_response_head(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Pass a plain HTTP response's heads (any 1xx, then the final one) with the final one
    saying ``Connection: close``: the client opens a new connection, and so a new check,
    for its next request instead of sending it on to this destination."""
    while True:
        raw = await asyncio.wait_for(source.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
        status_line, *headers = raw.decode("latin-1").split("\r\n")[:-2]
        informational = status_line[9:10] == "1" and status_line[9:12] != "101"
        if informational:
            sink.write(raw)
            continue
        head = "\r\n".join([status_line, *end_to_end(headers), "Connection: close", "", ""])
        sink.write(head.encode("latin-1"))
        return


async def pipe(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, idle: float | None = None
) -> None:
    """Copy ``source`` to ``sink`` until EOF (passed on as EOF), an error or ``idle``
    seconds without a byte (both closing ``sink``)."""
    try:
        while data := await asyncio.wait_for(source.read(CHUNK), idle):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):  # TimeoutError (idle) is an OSError
        sink.close()


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
    *,
    target: tuple[str, int],
    plain: bool,
) -> None:
    """Bytes both ways until the destination is done, or has sent nothing for
    ``IDLE_TIMEOUT``: a client that has sent all it will send still gets the reply, one
    that sends nothing while it downloads keeps the connection, and one that never closes
    is not waited for once the destination has closed. A plain HTTP reply's heads are
    rewritten on their way (``forward_response_head``) while the request's body goes on."""
    sending = asyncio.ensure_future(pipe(reader, upstream))
    try:
        if plain:
            try:
                await forward_response_head(upstream_reader, writer)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
                detail = MSG_NO_REPLY.format(host=target[0], port=target[1], detail=reason(exc))
                respond(writer, "502 Bad Gateway", detail)
                return
        await pipe(upstream_reader, writer, idle=IDLE_TIMEOUT)
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, rules: Rules) -> None:
    """One proxied connection: read the request's head, check and open the destination,
    then ``relay``."""
    upstream: asyncio.StreamWriter | None = None
    try:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return
        request_line, *headers = raw.decode("latin-1").split("\r\n")[:-2]
        try:
            parts = request_line.split(" ")
            if len(parts) != 3:
                raise ValueError(f"{request_line[:200]!r} is not a request line")
            method, target, version = parts
            if method == "CONNECT":
                host, port = split_authority(target)
                head = b""
            else:
                host, port, head = forwarded_head(method, target, version, headers)
        except ValueError as exc:
            respond(writer, "400 Bad Request", MSG_BAD_REQUEST.format(detail=exc))
            return
        try:
            upstream_reader, upstream = await open_checked(host, port, rules)
        except Refused as exc:
            respond(writer, "403 Forbidden", str(exc))
            return
        except (OSError, UnicodeError) as exc:
            respond(
                writer, "502 Bad Gateway", MSG_UNREACHABLE.format(host=host, port=port, detail=reason(exc))
            )
            return
        if head:
            upstream.write(head)
        else:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await relay(reader, writer, upstream_reader, upstream, target=(host, port), plain=bool(head))
    finally:
        for stream in (upstream, writer):
            if stream is not None:
                stream.close()
                with contextlib.suppress(OSError, RuntimeError):
                    await stream.wait_closed()


async def open_server(listener: socket.socket, rules: Rules) -> asyncio.Server:
    """The proxy serving ``listener`` under ``rules``."""
    # The loop holds a connection's task only weakly, and its protocol lets go of it once
    # the client has sent EOF: this set keeps every connection alive until it is done.
    connections: set[asyncio.Task[None]] = set()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await handle(reader, writer, rules=rules)
        finally:
            connections.discard(task)

    return await asyncio.start_unix_server(connection, sock=listener, limit=HEAD_LIMIT)


async def serve(listener: socket.socket, allow: Sequence[Network], deny: Sequence[str]) -> None:
    """Serve ``listener`` until standard input closes (the app that started us is gone, or
    ended the run); ``READY`` on standard output once serving."""
    server = await open_server(listener, Rules(allow=tuple(allow), denied=await denied_addresses(deny)))
    loop = asyncio.get_running_loop()
    ended = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(ended), sys.stdin)
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    async with server:
        while await ended.read(4096):
            pass


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m promptmgr.egress", description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="a listening unix socket, inherited")
    parser.add_argument("--allow", action="append", default=[], help="a network (CIDR) to open as well")
    parser.add_argument(
        "--deny", action="append", default=[], help="a host never to open (the app's services)"
    )
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(listener, parse_networks(args.allow), args.deny))


if __name__ == "__main__":
    main()
