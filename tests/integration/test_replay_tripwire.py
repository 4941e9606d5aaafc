"""The replay's network tripwire and its ``REPROIT:REPLAY`` line, in this process.

:func:`install_replay` runs for real on a small capsule. Every test that aims at a
non-loopback address first replaces ``socket.socket.connect`` with a stand-in that fails the
test instead of connecting; the tripwire wraps that stand-in, so if it ever let a connection
through, the test fails and no packet is sent.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from reproit_otel.replay import REPLAY_MARKER, install_replay, uninstall_replay
from reproit_otel.replay.session import active_session, quiet_refusal_count
from reproit_otel.replay.tripwire import is_local_address, tripwire_installed
from reproit_otel.verdict import REPLAY_MARKER as VERDICT_REPLAY_MARKER
from tests.integration.upstream import Upstream

CAPSULE: dict[str, Any] = {
    "format": "reproit-backend-capture",
    "version": 2,
    "operation": "GET /quote",
    "events": [
        {"kind": "start", "sequence": 0, "operation": "GET /quote", "input": {}},
        {
            "kind": "effect",
            "sequence": 1,
            "operation": "GET /quote",
            "effect": "call",
            "exchange": {
                "protocol": "http",
                "request": {"method": "GET", "url": "http://pricing.internal/json"},
                "response": {"status": 200, "body": {"rate": 1.5}},
            },
        },
        {"kind": "return", "sequence": 2, "operation": "GET /quote", "status": 500},
    ],
}


def socket_line(address: str, port: int, family: str, consumed: int = 0) -> str:
    got = json.dumps({"address": address, "port": port, "family": family}, separators=(",", ":"))
    return (
        f'REPROIT:DIVERGENCE {{"protocol":"socket","got":{got},"expected":null,'
        f'"consumed":{consumed},"total":1}}'
    )


class NoTraffic(AssertionError):
    """Raised by the stand-in connect: the tripwire let a non-loopback connection through."""


@pytest.fixture
def capsule_path(tmp_path: Path) -> Path:
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps(CAPSULE), encoding="utf-8")
    return path


@pytest.fixture
def replaying(
    capsule_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Iterator[Path]:
    real_connect = socket.socket.connect

    def connect_loopback_only(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not is_local_address(address[0]):
            raise NoTraffic(f"a connection to {address} was about to leave the process")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect_loopback_only)
    install_replay(capsule_path)
    try:
        yield capsule_path
    finally:
        uninstall_replay()


def stderr_lines(capfd: pytest.CaptureFixture[str]) -> list[str]:
    return capfd.readouterr().err.splitlines()


def test_install_replay_writes_the_replay_line_once(
    replaying: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert stderr_lines(capfd) == [f'REPROIT:REPLAY {{"capsule":"{replaying}","exchanges":1}}']
    assert REPLAY_MARKER == VERDICT_REPLAY_MARKER == "REPROIT:REPLAY "
    install_replay(replaying)  # already active: the same session, no second line
    assert stderr_lines(capfd) == []


def test_a_ci_capsule_gets_no_replay_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Its REPROIT:CI-TEST line proves the replay; CI marker lines stay the reference's.
    path = tmp_path / "ci.json"
    path.write_text(json.dumps({**CAPSULE, "operation": "test:unit#case"}), encoding="utf-8")
    install_replay(path)
    try:
        assert tripwire_installed()
        assert stderr_lines(capfd) == []
    finally:
        uninstall_replay()


def test_urllib_to_a_non_loopback_address_is_refused_and_reported(
    replaying: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    with pytest.raises(urllib.error.URLError) as raised:
        urllib.request.urlopen("http://10.255.255.1/prices", timeout=2)
    reason = raised.value.reason
    assert isinstance(reason, ConnectionRefusedError)
    assert (reason.errno, reason.strerror) == (
        errno.ECONNREFUSED,
        "reproit replay refused a connection to 10.255.255.1:80: the capsule does not serve "
        "this client, and a replay never reaches a live system",
    )
    assert stderr_lines(capfd) == [socket_line("10.255.255.1", 80, "AF_INET")]
    session = active_session()
    assert session is not None and session.diverged


def test_every_connect_path_is_refused_with_one_line_each(
    replaying: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    with socket.socket() as sock:
        assert sock.connect_ex(("192.0.2.7", 6379)) == errno.ECONNREFUSED
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("db.example.invalid", 5432), timeout=1)  # never resolved
    if socket.has_ipv6:
        with socket.socket(socket.AF_INET6) as sock, pytest.raises(ConnectionRefusedError):
            sock.connect(("2001:db8::1", 443, 0, 0))

    async def open_remote() -> None:
        await asyncio.open_connection("198.51.100.9", 25)

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(open_remote())
    expected = [
        socket_line("192.0.2.7", 6379, "AF_INET"),
        socket_line("db.example.invalid", 5432, "AF_UNSPEC"),
        *([socket_line("2001:db8::1", 443, "AF_INET6")] if socket.has_ipv6 else []),
        socket_line("198.51.100.9", 25, "AF_INET"),
    ]
    assert stderr_lines(capfd) == expected


def test_loopback_stays_reachable_during_a_replay(
    replaying: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        with urllib.request.urlopen(f"{upstream.base}/json", timeout=5) as answer:
            assert json.loads(answer.read()) == {"rate": 1.5, "currency": "EUR"}
        port = int(upstream.base.rsplit(":", 1)[1])
        with socket.create_connection(("localhost", port), timeout=5):
            pass
    finally:
        upstream.stop()
    assert stderr_lines(capfd)[1:] == []  # only the REPROIT:REPLAY line
    session = active_session()
    assert session is not None and not session.diverged


def test_telemetry_traffic_is_refused_quietly(
    replaying: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        with pytest.raises(requests.exceptions.ConnectionError) as by_requests:
            requests.post("http://collector.internal:4318/v1/traces", data=b"spans", timeout=2)
        with pytest.raises(ConnectionRefusedError) as by_socket:
            socket.create_connection(("203.0.113.5", 4317), timeout=1)
    finally:
        detach(token)
    assert str(by_requests.value) == (
        "reproit replay refused telemetry traffic (POST http://collector.internal:4318/v1/traces):"
        " calls made under OpenTelemetry's suppress_instrumentation are not served from the"
        " capsule and never leave a replayed process"
    )
    assert by_socket.value.strerror == (
        "reproit replay refused telemetry traffic to 203.0.113.5:4317; "
        "nothing leaves a replayed process"
    )
    assert quiet_refusal_count() == 2
    assert stderr_lines(capfd) == []
    session = active_session()
    assert session is not None and (session.diverged, session.consumed) == (False, 0)
    # The application's own call is still served from the capsule afterwards.
    assert requests.get("http://pricing.internal/json", timeout=2).json() == {"rate": 1.5}


def test_uninstall_restores_every_patched_function_exactly(capsule_path: Path) -> None:
    before = (
        "connect" in vars(socket.socket),
        "connect_ex" in vars(socket.socket),
        socket.create_connection,
        asyncio.base_events.BaseEventLoop.create_connection,
    )
    install_replay(capsule_path)
    assert tripwire_installed()
    uninstall_replay()
    assert not tripwire_installed()
    after = (
        "connect" in vars(socket.socket),
        "connect_ex" in vars(socket.socket),
        socket.create_connection,
        asyncio.base_events.BaseEventLoop.create_connection,
    )
    assert after == before
    assert active_session() is None


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", True),
        ("", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("api.localhost", True),
        (b"127.0.0.1", True),
        ("10.255.255.1", False),
        ("192.168.1.1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("example.com", False),
        ("localhost.example.com", False),
        (None, False),
    ],
)
def test_is_local_address(host: Any, local: bool) -> None:
    assert is_local_address(host) is local
