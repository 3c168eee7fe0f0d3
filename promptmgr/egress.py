"""The run sandbox's way out: an HTTP proxy (``CONNECT`` and plain HTTP) that never connects
to this server or a private network.

Claude Code's own sandbox (the ``command`` scope) gives commands the network through a proxy
of the CLI's that refuses the server's loopback by name. The run's own sandbox (the ``run``
scope, ``promptmgr.run_sandbox``) has a loopback of its own and nothing else; this is its
egress, one process per run:

- the app binds a unix socket in the run's temporary directory (read-only inside the
  sandbox) and hands it to this process (``--fd``), so a command never finds it missing;
- inside the sandbox ``socat`` listens on ``127.0.0.1:PORT`` and passes each connection to
  that socket, and every command gets ``HTTP_PROXY``/``HTTPS_PROXY`` pointing there (what
  ``npm``, ``pip``, ``git`` and ``curl`` follow, as in the ``command`` scope);
- this process resolves each host itself and connects only to an address outside the
  ``CLOSED`` networks (the loopback, where Redis and the app listen, private networks,
  where a deployment's shared PostgreSQL and Redis live, link-local ones, where a cloud
  keeps its metadata service), or inside one of the operator's ``--allow`` networks
  (``CLAUDE_SANDBOX_EGRESS_ALLOW``). It connects to the address it checked, so a name that
  resolves differently a second time gains nothing.

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
from functools import partial
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Inside the sandbox, where socat listens for the commands (the sandbox's own loopback).
PORT = 3128
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
CHUNK = 64 * 1024
# Hop-by-hop headers a plain HTTP request loses on its way through (RFC 9110 7.6.1).
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}

MSG_REFUSED = (
    "PromptManager's sandbox: {host} is at {address}, on this server or a private network, which "
    "sandboxed commands may not reach (an operator can open a network with "
    "CLAUDE_SANDBOX_EGRESS_ALLOW)."
)
MSG_BAD_REQUEST = "PromptManager's sandbox proxy: {detail}."
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
        "64:ff9b::/96",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)


def permitted(address: Address, allow: Sequence[Network]) -> bool:
    """Whether a sandboxed command may reach ``address``: one inside a network the operator
    allowed, or one in none of the ``CLOSED`` networks (an IPv6 address that carries an
    IPv4 one is judged by that one too)."""
    if any(address in network for network in allow):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo[1] if address.teredo else None)
        if embedded is not None and not permitted(embedded, allow):
            return False
    return not any(address in network for network in CLOSED)


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


async def open_checked(
    host: str, port: int, allow: Sequence[Network]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``host``, opened to an address ``permitted`` (``Refused`` if it has
    none)."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [str(info[4][0]) for info in found]
    usable = [a for a in addresses if permitted(ipaddress.ip_address(a.partition("%")[0]), allow)]
    if not usable:
        raise Refused(MSG_REFUSED.format(host=host, address=addresses[0] if addresses else "no address"))
    failure: OSError = OSError("no address")
    for address in usable:
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            failure = exc if isinstance(exc, OSError) else OSError("timed out")
    raise failure


def respond(writer: asyncio.StreamWriter, status: str, message: str) -> None:
    body = (message + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def forwarded_head(method: str, target: str, version: str, headers: list[str]) -> tuple[str, int, bytes]:
    """Host, port and the origin-form request of a plain HTTP proxy request (one request per
    connection: ``Connection: close``, the hop-by-hop headers dropped)."""
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"{target!r} is not an absolute http:// URL (use CONNECT for https)")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [line for line in headers if line.partition(":")[0].strip().lower() not in HOP_HEADERS]
    head = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
    return url.hostname, url.port or 80, head.encode("latin-1")


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):
        sink.close()


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
) -> None:
    """Bytes both ways until the destination is done: a client that has sent all it will
    send still gets the reply, and one that never closes is not waited for once the
    destination has closed."""
    sending = asyncio.ensure_future(pipe(reader, upstream))
    replying = asyncio.ensure_future(pipe(upstream_reader, writer))
    try:
        await replying
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending


async def handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, allow: Sequence[Network]
) -> None:
    """One proxied connection: read the request's head, check and open the destination,
    then pass bytes both ways until both sides are done."""
    upstream: asyncio.StreamWriter | None = None
    try:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
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
            upstream_reader, upstream = await open_checked(host, port, allow)
        except Refused as exc:
            respond(writer, "403 Forbidden", str(exc))
            return
        except (OSError, UnicodeError) as exc:
            respond(writer, "502 Bad Gateway", MSG_UNREACHABLE.format(host=host, port=port, detail=exc))
            return
        if head:
            upstream.write(head)
        else:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await relay(reader, writer, upstream_reader, upstream)
    finally:
        for stream in (upstream, writer):
            if stream is not None:
                stream.close()
                with contextlib.suppress(OSError, RuntimeError):
                    await stream.wait_closed()


async def serve(listener: socket.socket, allow: Sequence[Network]) -> None:
    """Serve ``listener`` until standard input closes (the app that started us is gone, or
    ended the run)."""
    server = await asyncio.start_unix_server(partial(handle, allow=allow), sock=listener, limit=HEAD_LIMIT)
    loop = asyncio.get_running_loop()
    ended = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(ended), sys.stdin)
    async with server:
        while await ended.read(4096):
            pass


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m promptmgr.egress", description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="a listening unix socket, inherited")
    parser.add_argument("--allow", action="append", default=[], help="a network (CIDR) to open as well")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(listener, parse_networks(args.allow)))


if __name__ == "__main__":
    main()
