"""ASK_USER_CONFIG: every way a config is refused, and the loopback-only rule for apiUrl."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from mcp_server import config as config_module
from mcp_server.config import (
    AskUserConfig,
    ConfigError,
    check_api_url,
    current_config,
    load_config,
    parse_config,
)
from tests.mcp_server.fake_relay import RELAY_TOKEN, config_data

pytestmark = pytest.mark.unit


def resolver_for(*addresses: str) -> Callable[..., Sequence[tuple[Any, ...]]]:
    """A getaddrinfo stand-in that resolves every host to ``addresses``."""

    def resolve(host: str, port: int | None, **_: Any) -> list[tuple[Any, ...]]:
        family = socket.AF_INET6
        return [
            (socket.AF_INET if ":" not in a else family, socket.SOCK_STREAM, 6, "", (a, port or 80))
            for a in addresses
        ]

    return resolve


def unresolvable(host: str, port: int | None, **_: Any) -> list[tuple[Any, ...]]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_valid_config_file_loads(write_config: Callable[..., Path]) -> None:
    config = load_config(str(write_config("http://127.0.0.1:8000/")))
    assert config == AskUserConfig(
        api_url="http://127.0.0.1:8000",
        stream_token=config.stream_token,
        relay_token=RELAY_TOKEN,
        project_id=1,
        run_id=5,
        timeout=300,
    )


def test_the_relay_token_is_kept_out_of_the_repr(write_config: Callable[..., Path]) -> None:
    config = load_config(str(write_config()))
    assert RELAY_TOKEN not in repr(config)


def test_run_id_may_be_left_out() -> None:
    data = config_data()
    del data["runId"]
    assert parse_config(data).run_id is None


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_env_var_is_refused(value: str | None) -> None:
    with pytest.raises(ConfigError, match="ASK_USER_CONFIG environment variable is not set"):
        load_config(value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "nope.json"))


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(str(tmp_path))


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{apiUrl: nope", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(path))


def test_a_json_file_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(["apiUrl"]), encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_config(str(path))


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config_data(padding="x" * 70_000)), encoding="utf-8")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(str(path))


@pytest.mark.parametrize("key", ["apiUrl", "streamToken", "relayToken", "projectId", "timeout"])
def test_a_missing_field_is_refused(key: str) -> None:
    data = config_data()
    del data[key]
    with pytest.raises(ConfigError, match=f"the config has no {key}"):
        parse_config(data)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("relayToken", "", "relayToken must be a non-empty string"),
        ("streamToken", 42, "streamToken must be a non-empty string"),
        ("projectId", "1", "projectId must be an integer"),
        ("runId", True, "runId must be an integer"),
        ("timeout", 300.5, "timeout must be an integer"),
        ("timeout", True, "timeout must be an integer"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config_data(**{key: value}))


@pytest.mark.parametrize("timeout", [29, 901, 0, -5])
def test_a_timeout_outside_30_to_900_seconds_is_refused(timeout: int) -> None:
    with pytest.raises(ConfigError, match="timeout must be between 30 and 900 seconds"):
        parse_config(config_data(timeout=timeout))


@pytest.mark.parametrize("timeout", [30, 900])
def test_the_timeout_bounds_are_inclusive(timeout: int) -> None:
    assert parse_config(config_data(timeout=timeout)).timeout == timeout


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://127.5.6.7", "https://[::1]:8443/prefix", "http://localhost:8000"],
)
def test_loopback_api_urls_are_accepted(url: str) -> None:
    assert check_api_url(url) == url


def test_an_ipv4_mapped_loopback_address_counts_as_loopback() -> None:
    assert check_api_url("http://app.internal", resolve=resolver_for("::ffff:127.0.0.1"))


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "http://0.0.0.0:8000", "http://[2001:db8::1]/"])
def test_a_non_loopback_address_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="must resolve only to loopback addresses"):
        check_api_url(url)


def test_a_hostname_that_resolves_off_the_machine_is_refused() -> None:
    with pytest.raises(ConfigError, match="not 93.184.216.34"):
        check_api_url("http://promptmanager.example.com", resolve=resolver_for("93.184.216.34"))


def test_a_hostname_with_any_non_loopback_address_is_refused() -> None:
    with pytest.raises(ConfigError, match="not 192.168.1.20"):
        check_api_url("http://localhost:8000", resolve=resolver_for("127.0.0.1", "192.168.1.20"))


def test_a_hostname_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not resolve"):
        check_api_url("http://nowhere.invalid", resolve=unresolvable)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://127.0.0.1/", "must be an http:// or https:// URL"),
        ("127.0.0.1:8000", "must be an http:// or https:// URL"),
        ("http://user:pw@127.0.0.1:8000", "must not contain a user name or password"),
        ("http://127.0.0.1:8000/?next=x", "must not have a query string"),
        ("http://127.0.0.1:99999", "not a valid URL"),
    ],
)
def test_a_malformed_api_url_is_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_api_url(url)


def test_refusals_never_repeat_the_relay_token(write_config: Callable[..., Path]) -> None:
    bad = [
        config_data("http://10.0.0.1"),
        config_data(timeout=5),
        config_data(projectId="x"),
        config_data(f"http://{RELAY_TOKEN}@127.0.0.1"),
    ]
    for data in bad:
        with pytest.raises(ConfigError) as caught:
            parse_config(data)
        assert RELAY_TOKEN not in str(caught.value)


@pytest.mark.asyncio
async def test_a_tool_call_reuses_the_config_until_the_file_changes(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str | None] = []

    def counted(path: str | None) -> AskUserConfig:
        reads.append(path)
        return load_config(path)

    monkeypatch.setattr(config_module, "load_config", counted)
    path = write_config("http://127.0.0.1:8000", timeout=300)
    first = await current_config(str(path))
    assert await current_config(str(path)) is first
    assert len(reads) == 1

    replaced = path.with_name("staged.json")
    replaced.write_text(json.dumps(config_data("http://127.0.0.1:8000", timeout=120)))
    replaced.replace(path)  # as PromptManager writes it: a new file in its place
    assert (await current_config(str(path))).timeout == 120
    assert len(reads) == 2


@pytest.mark.asyncio
async def test_a_config_that_went_missing_or_bad_is_refused_at_once(
    write_config: Callable[..., Path],
) -> None:
    path = write_config("http://127.0.0.1:8000")
    await current_config(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        await current_config(str(path))
    path.unlink()
    with pytest.raises(ConfigError, match="does not exist"):
        await current_config(str(path))
    with pytest.raises(ConfigError, match="environment variable is not set"):
        await current_config(None)
