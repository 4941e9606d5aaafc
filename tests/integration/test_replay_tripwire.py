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
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

from reproit_otel.check.judgement import REPLAY_MARKER as VERDICT_REPLAY_MARKER
from reproit_otel.replay import REPLAY_MARKER, install_replay, uninstall_replay
from reproit_otel.replay.session import active_session, quiet_refusal_count
from reproit_otel.replay.tripwire import is_local_address, tripwire_installed
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
    import _posixsubprocess

    def patched() -> tuple[Any, ...]:
        return (
            *(name in vars(socket.socket) for name in ("connect", "connect_ex", "sendto")),
            *(name in vars(socket.socket) for name in ("sendmsg", "send", "sendall")),
            socket.create_connection,
            socket.getaddrinfo,
            socket.gethostbyname,
            socket.gethostbyname_ex,
            socket.gethostbyaddr,
            socket.getnameinfo,
            asyncio.base_events.BaseEventLoop.create_connection,
            asyncio.base_events.BaseEventLoop.create_datagram_endpoint,
            subprocess.Popen.__init__,
            _posixsubprocess.fork_exec,
            os.system,
            os.execv,
            os.execve,
            os.posix_spawn,
            os.posix_spawnp,
            os.spawnv,
            os.spawnve,
            os.spawnvp,
            os.spawnvpe,
        )

    before = patched()
    install_replay(capsule_path)
    assert tripwire_installed()
    during = patched()
    uninstall_replay()
    assert not tripwire_installed()
    assert patched() == before
    assert during[:6] == (True,) * 6  # each socket method wrapped on socket.socket itself
    assert [a is b for a, b in zip(during[6:], before[6:], strict=True)] == [False] * 19
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


# --- every other egress: datagrams, raw frames, name lookups, child processes -----------------


def dns_line(name: str, consumed: int = 0) -> str:
    return (
        f'REPROIT:DIVERGENCE {{"protocol":"dns","got":{{"name":{json.dumps(name)}}},'
        f'"expected":null,"consumed":{consumed},"total":1}}'
    )


def process_line(program: str) -> str:
    return (
        f'REPROIT:DIVERGENCE {{"protocol":"process","got":{{"program":{json.dumps(program)}}},'
        '"expected":null,"consumed":0,"total":1}'
    )


@pytest.fixture
def egress_replay(
    capsule_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Iterator[Path]:
    """A replay over stand-ins that fail the test if a datagram or a lookup got through."""
    real_sendto, real_sendmsg = socket.socket.sendto, socket.socket.sendmsg
    real_getaddrinfo, real_gethostbyname = socket.getaddrinfo, socket.gethostbyname

    def leaving(address: Any) -> bool:
        return isinstance(address, tuple) and bool(address) and not is_local_address(address[0])

    def sendto(self: socket.socket, data: Any, *args: Any) -> Any:
        if leaving(args[-1]):
            raise NoTraffic(f"a datagram to {args[-1]} was about to leave the process")
        return real_sendto(self, data, *args)

    def sendmsg(self: socket.socket, buffers: Any, *args: Any) -> Any:
        if len(args) > 2 and leaving(args[2]):
            raise NoTraffic(f"a message to {args[2]} was about to leave the process")
        return real_sendmsg(self, buffers, *args)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "localhost", "127.0.0.1", "::1"):
            raise NoTraffic(f"{host!r} was about to be resolved")
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host: Any) -> Any:
        if host not in ("localhost", "127.0.0.1"):
            raise NoTraffic(f"{host!r} was about to be resolved")
        return real_gethostbyname(host)

    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket.socket, "sendmsg", sendmsg)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "gethostbyname", gethostbyname)
    install_replay(capsule_path)
    try:
        yield capsule_path
    finally:
        uninstall_replay()


def test_datagrams_beyond_loopback_are_refused_with_one_line_each(
    egress_replay: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(ConnectionRefusedError) as by_sendto:
            udp.sendto(b"statsd:1|c", ("192.0.2.10", 8125))
        with pytest.raises(ConnectionRefusedError):
            udp.sendto(b"query", 0, ("198.51.100.53", 53))
        with pytest.raises(ConnectionRefusedError):
            udp.sendmsg([b"syslog"], [], 0, ("203.0.113.4", 514))
    fastopen = getattr(socket, "MSG_FASTOPEN", 0x20000000)
    with socket.socket() as tcp, pytest.raises(ConnectionRefusedError):
        tcp.sendto(b"GET / HTTP/1.0\r\n\r\n", fastopen, ("192.0.2.80", 80))
    assert by_sendto.value.strerror == (
        "reproit replay refused a connection to 192.0.2.10:8125: the capsule does not serve "
        "this client, and a replay never reaches a live system"
    )
    assert stderr_lines(capfd) == [
        socket_line("192.0.2.10", 8125, "AF_INET"),
        socket_line("198.51.100.53", 53, "AF_INET"),
        socket_line("203.0.113.4", 514, "AF_INET"),
        socket_line("192.0.2.80", 80, "AF_INET"),
    ]


def test_asyncio_datagram_endpoints_beyond_loopback_are_refused(
    egress_replay: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    errors: list[BaseException] = []

    class Protocol(asyncio.DatagramProtocol):
        def error_received(self, exc: Exception) -> None:
            errors.append(exc)

    async def send() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(ConnectionRefusedError):
            await loop.create_datagram_endpoint(Protocol, remote_addr=("192.0.2.20", 9))
        transport, _ = await loop.create_datagram_endpoint(Protocol, local_addr=("127.0.0.1", 0))
        try:
            transport.sendto(b"metric", ("192.0.2.21", 9))
            await asyncio.sleep(0)
        finally:
            transport.close()

    asyncio.run(send())
    assert [type(error) for error in errors] == [ConnectionRefusedError]
    assert stderr_lines(capfd) == [
        socket_line("192.0.2.20", 9, "AF_INET"),
        socket_line("192.0.2.21", 9, "AF_INET"),
    ]


def test_loopback_datagrams_still_flow(
    egress_replay: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender,
    ):
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(5)
        sender.sendto(b"local", receiver.getsockname())
        assert receiver.recvfrom(64)[0] == b"local"
    assert stderr_lines(capfd) == []


def test_name_lookups_beyond_loopback_are_refused(
    egress_replay: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stderr_lines(capfd)
    with pytest.raises(socket.gaierror) as by_getaddrinfo:
        socket.getaddrinfo("db.example.com", 5432)
    with pytest.raises(socket.gaierror):
        socket.gethostbyname("api.example.com")
    with pytest.raises(socket.gaierror):
        socket.gethostbyaddr("192.0.2.30")

    async def resolve() -> None:
        await asyncio.get_running_loop().getaddrinfo("cache.example.com", 6379)

    with pytest.raises(socket.gaierror):
        asyncio.run(resolve())
    assert (by_getaddrinfo.value.errno, by_getaddrinfo.value.strerror) == (
        socket.EAI_NONAME,
        "reproit replay refused to resolve 'db.example.com' for the application: a replay "
        "never asks a name server (only loopback names and IP literals resolve)",
    )
    assert stderr_lines(capfd) == [
        dns_line("db.example.com"),
        dns_line("api.example.com"),
        dns_line("192.0.2.30"),
        dns_line("cache.example.com"),
    ]
    # Loopback names and IP literals need no name server.
    assert socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    assert socket.gethostbyname("localhost") == "127.0.0.1"
    assert socket.getaddrinfo("127.0.0.1", 80)[0][4] == ("127.0.0.1", 80)
    assert stderr_lines(capfd) == []


def test_child_processes_that_would_not_arm_the_replay_are_refused(
    egress_replay: Path, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stderr_lines(capfd)
    ran = tmp_path / "ran"
    shell = f"touch {ran}"
    with pytest.raises(PermissionError) as by_popen:
        subprocess.run(["sh", "-c", shell], check=False)
    with pytest.raises(PermissionError):
        subprocess.run(shell, shell=True, check=False)
    with pytest.raises(PermissionError):
        subprocess.run([sys.executable, "-c", f"open({str(ran)!r}, 'w')"], check=False)
    with pytest.raises(PermissionError):
        os.system(shell)
    with pytest.raises(PermissionError):
        os.posix_spawnp("sh", ["sh", "-c", shell], dict(os.environ))
    with pytest.raises(PermissionError):
        os.spawnlp(os.P_WAIT, "sh", "sh", "-c", shell)
    assert not ran.exists()
    assert by_popen.value.strerror == (
        "reproit replay refused to start 'sh': a child process that does not arm the same "
        "replay (this Python under opentelemetry-instrument, with REPROIT_REPLAY) could reach "
        "live systems"
    )
    python = Path(sys.executable).name
    assert stderr_lines(capfd) == [
        process_line("sh"),
        process_line("sh"),
        process_line(python),
        process_line("sh"),
        process_line("sh"),
        process_line("sh"),
    ]


def test_a_python_child_under_the_launcher_inherits_the_replay(
    egress_replay: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child runs opentelemetry-instrument's sitecustomize, which arms the same replay in
    # it (tripwire included) or stops it: its own REPROIT:REPLAY line says it is armed.
    from opentelemetry.instrumentation import auto_instrumentation

    stderr_lines(capfd)
    monkeypatch.setenv("REPROIT_REPLAY", str(egress_replay))
    child_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "PYTHONPATH": os.path.dirname(auto_instrumentation.__file__),
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    program = "import socket; print(getattr(socket.socket.connect, '__reproit_tripwire__', False))"
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "True\n")
    assert (
        f'REPROIT:REPLAY {{"capsule":"{egress_replay}","exchanges":1}}' in done.stderr.splitlines()
    )
    assert stderr_lines(capfd) == []
