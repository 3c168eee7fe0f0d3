"""Load and validate the per-run config file named by ``ASK_USER_CONFIG``.

PromptManager writes the file (mode 0600) before it starts Claude. Every tool call looks at it
(``current_config``), so a bad or missing file gives Claude a clear tool error instead of a
server that fails to start. The relay token must only ever travel to PromptManager on this
machine, hence the loopback check.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONFIG_ENV_VAR = "ASK_USER_CONFIG"
MIN_TIMEOUT = 30
MAX_TIMEOUT = 900
# A real config is a few hundred bytes; anything much larger is not ours.
MAX_CONFIG_BYTES = 64 * 1024

# Same call shape as socket.getaddrinfo(host, port, type=...); injectable for tests.
Resolver = Callable[..., Sequence[tuple[Any, ...]]]


class ConfigError(Exception):
    """The config is unusable; the message is a reason safe to show (it never holds the token)."""


@dataclass(frozen=True)
class AskUserConfig:
    api_url: str
    stream_token: str
    relay_token: str = field(repr=False)
    project_id: int
    run_id: int | None
    timeout: int


# The last good config per path, with the file's identity when it was read.
_loaded: dict[str, tuple[tuple[int, int, int, int], AskUserConfig]] = {}


async def current_config(path: str | None) -> AskUserConfig:
    """``load_config`` for a tool call: the config read last time while the file is the same.

    A stat on the loop tells whether the file changed (inode, size, mtime); only a changed,
    new or missing file is read again, in a worker thread (the read and the loopback check's
    name resolution block). The thread's round trip, the read and the resolution were ~0.3 ms
    on the way of every question and permission request (``bench/mcp_hop.py``). Errors are
    never kept: a file that is missing or bad now raises ``ConfigError`` now.
    """
    identity = None
    if path:
        try:
            found = os.stat(path)
        except OSError:
            pass  # load_config says why, in its words
        else:
            identity = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
            kept = _loaded.get(path)
            if kept is not None and kept[0] == identity:
                return kept[1]
    config = await asyncio.to_thread(load_config, path)
    if path and identity is not None:
        _loaded[path] = (identity, config)
    return config


def load_config(path: str | None, *, resolve: Resolver = socket.getaddrinfo) -> AskUserConfig:
    """Read the file at ``path`` (the value of ``ASK_USER_CONFIG``) and validate it.

    Blocking (file read and name resolution): call it from a worker thread in async code.
    """
    if not path:
        raise ConfigError(f"the {CONFIG_ENV_VAR} environment variable is not set")
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"the config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"the config file {path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the config file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError(f"the config file {path} is not valid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} must hold a JSON object")
    return parse_config(data, resolve=resolve)


def parse_config(data: Mapping[str, Any], *, resolve: Resolver = socket.getaddrinfo) -> AskUserConfig:
    api_url = _required_string(data, "apiUrl")
    stream_token = _required_string(data, "streamToken")
    relay_token = _required_string(data, "relayToken")
    project_id = _required_int(data, "projectId")
    run_id = _optional_int(data, "runId")
    timeout = _required_int(data, "timeout")
    if not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        raise ConfigError(f"timeout must be between {MIN_TIMEOUT} and {MAX_TIMEOUT} seconds, not {timeout}")
    return AskUserConfig(
        api_url=check_api_url(api_url, resolve=resolve),
        stream_token=stream_token,
        relay_token=relay_token,
        project_id=project_id,
        run_id=run_id,
        timeout=timeout,
    )


def check_api_url(url: str, *, resolve: Resolver = socket.getaddrinfo) -> str:
    """Return ``url`` without a trailing slash if it is http(s) on a host that resolves only to loopback."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError("apiUrl is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("apiUrl must be an http:// or https:// URL with a host")
    # Credentials in the URL would end up in logs; the relay token is the only credential.
    if parts.username is not None or parts.password is not None:
        raise ConfigError("apiUrl must not contain a user name or password")
    if parts.query or parts.fragment:
        raise ConfigError("apiUrl must not have a query string or fragment")
    host = parts.hostname
    try:
        infos = resolve(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise ConfigError(f"apiUrl host {host!r} does not resolve") from None
    addresses = {str(info[4][0]) for info in infos}
    if not addresses:
        raise ConfigError(f"apiUrl host {host!r} does not resolve")
    outside = sorted(address for address in addresses if not _is_loopback(address))
    if outside:
        raise ConfigError(
            f"apiUrl host {host!r} must resolve only to loopback addresses, not {', '.join(outside)}"
        )
    return url.rstrip("/")


def _is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _required_string(data: Mapping[str, Any], key: str) -> str:
    if key not in data:
        raise ConfigError(f"the config has no {key}")
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key} must be a non-empty string")
    return value.strip()


def _required_int(data: Mapping[str, Any], key: str) -> int:
    if key not in data:
        raise ConfigError(f"the config has no {key}")
    return _as_int(data[key], key)


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return None if value is None else _as_int(value, key)


def _as_int(value: object, key: str) -> int:
    # bool is an int subclass; true/false is never a valid id or timeout.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer")
    return value
