"""The network tripwire of a replay: nothing in the replayed process reaches another host.

The replay instrumentors serve ``requests``, ``httpx``, ``psycopg2`` and invoke boundaries from the
capsule, so those never open a socket. Every other client (``urllib.request``,
``http.client``, httpx, a redis or SMTP client, a raw socket) would reach whatever answers at
its address. While a replay is installed, :func:`install_tripwire` puts a check in front of
every outgoing connection made through Python's :mod:`socket` module:

* :meth:`socket.socket.connect` and :meth:`socket.socket.connect_ex` (so ``http.client``,
  ``urllib.request``, :mod:`ssl` sockets, and asyncio's selector event loops, which connect
  through them);
* :func:`socket.create_connection`, and asyncio's ``loop.create_connection`` (checked before
  the host name is resolved, so a refused name is not even looked up).

A connection to a loopback address (``127.0.0.0/8``, ``::1``, an IPv4-mapped loopback, the
unspecified ``0.0.0.0``/``::``, or a ``localhost`` name) goes through: that is the
application's own server and the check's probe. Sockets of other families (Unix domain
sockets) are not touched. Any other address (a non-loopback IP address, or any host name
other than ``localhost``, which is refused without being resolved) is refused before a single
packet leaves the process:

* the attempt raises :class:`ConnectionRefusedError` (``connect_ex`` returns ``ECONNREFUSED``)
  with a message saying that reproit replay refused it;
* one ``REPROIT:DIVERGENCE`` line with ``protocol: "socket"`` goes to the real standard
  error, and the session is marked diverged. Its ``got`` is ``{"address", "port",
  "family"}`` (the host as the application gave it, the port, and the socket family's name:
  ``AF_INET``, ``AF_INET6``, or ``AF_UNSPEC`` for ``create_connection`` with a host name);
  ``expected`` is ``null``; ``consumed`` and ``total`` count the session's recorded
  exchanges as in every other DIVERGENCE line::

    REPROIT:DIVERGENCE {"protocol":"socket","got":{"address":"10.255.255.1","port":80,\
"family":"AF_INET"},"expected":null,"consumed":2,"total":5}

  (one line; cut here to fit the page).

Traffic made under OpenTelemetry's ``suppress_instrumentation`` (span, metric and log
exporters) is not the application's behaviour: it is refused the same way but quietly, with
no DIVERGENCE line; :func:`reproit_otel.replay.session.quiet_refusal_count` counts it.

Not covered: C extensions that open their own sockets (libpq, gRPC's core, uvloop) and
sockets created from :mod:`_socket` directly. ``reproit-otel doctor`` lists the libraries an
application imports that a replay cannot serve.

Locks. ``_lock`` only orders :func:`install_tripwire` and :func:`uninstall_tripwire` (the
patching itself). A refused connection takes no lock of this module: it counts under the
session module's lock and writes its line after it (``replay/session.py``), so a connection
attempted from a finalizer or a logging handler (an exporter's) cannot wait on a lock its
thread holds.
"""

from __future__ import annotations

import asyncio.base_events
import errno
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

from reproit_otel.replay.session import active_session, note_quiet_refusal, report_divergence

__all__ = [
    "DNS_PROTOCOL",
    "TRIPWIRE_PROTOCOL",
    "install_tripwire",
    "is_local_address",
    "tripwire_installed",
    "uninstall_tripwire",
]

TRIPWIRE_PROTOCOL = "socket"
"""The ``protocol`` of the DIVERGENCE line a refused connection or datagram writes."""
DNS_PROTOCOL = "dns"
"""The ``protocol`` of the DIVERGENCE line a refused name lookup writes."""

_INET_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_LOCAL_NAMES = ("localhost", "localhost.", "localhost.localdomain")

_lock = threading.Lock()
# "<id of owner>.<name>" -> (the owner defined it itself, the original attribute)
_originals: dict[str, tuple[bool, Any]] = {}


def is_local_address(host: Any) -> bool:
    """True when ``host`` (an IP literal or a name) is this machine, decided without DNS."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().lower()
    if name == "" or name in _LOCAL_NAMES or name.endswith(".localhost"):
        return True  # "" is INADDR_ANY for AF_INET
    literal = name.removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        return False  # a name other than localhost: refused without resolving it
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _family_name(family: Any) -> str:
    try:
        return socket.AddressFamily(family).name
    except ValueError:
        return str(family)


def _family_of(host: Any) -> str:
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return "AF_UNSPEC"
    return "AF_INET" if address.version == 4 else "AF_INET6"


def _suppressed() -> bool:
    from reproit_otel.capture.recording import is_suppressed

    return is_suppressed()


def _diverged(protocol: str, got: dict[str, Any]) -> bool:
    """Report one refused attempt: a DIVERGENCE line, or quietly for telemetry traffic.

    Returns whether it was telemetry traffic (made under ``suppress_instrumentation``).
    """
    if _suppressed():
        note_quiet_refusal()
        return True
    session = active_session()
    if session is not None:
        line = session.diverge(protocol, got)
        if session.on_divergence is None:  # a session with a callback reports it itself
            report_divergence(line)
    return False


def _refusal(host: Any, port: Any, family: str) -> ConnectionRefusedError:
    """Report the refused attempt (a DIVERGENCE line, or quietly) and build its exception."""
    shown = host.decode("ascii", "replace") if isinstance(host, bytes) else host
    if _diverged(TRIPWIRE_PROTOCOL, {"address": shown, "port": port, "family": family}):
        return ConnectionRefusedError(
            errno.ECONNREFUSED,
            f"reproit replay refused telemetry traffic to {shown}:{port}; "
            "nothing leaves a replayed process",
        )
    return ConnectionRefusedError(
        errno.ECONNREFUSED,
        f"reproit replay refused a connection to {shown}:{port}: the capsule does not serve "
        "this client, and a replay never reaches a live system",
    )


def _resolution_refusal(name: Any) -> socket.gaierror:
    """Report a refused name lookup and build its exception (``EAI_NONAME``)."""
    shown = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
    quiet = _diverged(DNS_PROTOCOL, {"name": shown})
    what = "telemetry traffic" if quiet else "the application"
    return socket.gaierror(
        socket.EAI_NONAME,
        f"reproit replay refused to resolve {shown!r} for {what}: a replay never asks a name "
        "server (only loopback names and IP literals resolve)",
    )


def _refused_target(sock: socket.socket, address: Any) -> tuple[Any, Any, str] | None:
    """``(host, port, family)`` when connecting ``sock`` to ``address`` must be refused."""
    if sock.family not in _INET_FAMILIES or not isinstance(address, tuple) or not address:
        return None
    host = address[0]
    if is_local_address(host):
        return None
    port = address[1] if len(address) > 1 else None
    return host, port, _family_name(sock.family)


def _patched_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect(self: socket.socket, address: Any) -> Any:
        target = _refused_target(self, address)
        if target is not None:
            raise _refusal(*target)
        return original(self, address)

    connect.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return connect


def _patched_connect_ex(original: Callable[..., Any]) -> Callable[..., Any]:
    def connect_ex(self: socket.socket, address: Any) -> Any:
        target = _refused_target(self, address)
        if target is not None:
            return _refusal(*target).errno
        return original(self, address)

    connect_ex.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return connect_ex


def _patched_create_connection(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_connection(address: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(address, tuple) and len(address) >= 2:
            host, port = address[0], address[1]
            if not is_local_address(host):
                raise _refusal(host, port, _family_of(host))
        return original(address, *args, **kwargs)

    create_connection.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return create_connection


def _patched_loop_create_connection(original: Callable[..., Any]) -> Callable[..., Any]:
    async def create_connection(
        self: Any, protocol_factory: Any, host: Any = None, port: Any = None, **kwargs: Any
    ) -> Any:
        if host is not None and not is_local_address(host):
            raise _refusal(host, port, _family_of(host))
        return await original(self, protocol_factory, host, port, **kwargs)

    create_connection.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return create_connection


def _send_target(sock: socket.socket, address: Any) -> tuple[Any, Any, str] | None:
    """Like :func:`_refused_target` for a datagram or a ``MSG_FASTOPEN`` send to ``address``."""
    if sock.family == _AF_PACKET:
        return ("link layer", None, "AF_PACKET")  # a raw frame never stays on this machine
    return _refused_target(sock, address)


def _patched_sendto(original: Callable[..., Any]) -> Callable[..., Any]:
    def sendto(self: socket.socket, data: Any, *args: Any) -> Any:
        # sendto(data, address) or sendto(data, flags, address) (MSG_FASTOPEN among flags)
        target = _send_target(self, args[-1] if args else None)
        if target is not None:
            raise _refusal(*target)
        return original(self, data, *args)

    sendto.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return sendto


def _patched_sendmsg(original: Callable[..., Any]) -> Callable[..., Any]:
    def sendmsg(self: socket.socket, buffers: Any, *args: Any) -> Any:
        # sendmsg(buffers[, ancdata[, flags[, address]]])
        address = args[2] if len(args) > 2 else None
        target = _send_target(self, address) if address is not None else None
        if target is None and self.family == _AF_PACKET:
            target = _send_target(self, None)
        if target is not None:
            raise _refusal(*target)
        return original(self, buffers, *args)

    sendmsg.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return sendmsg


def _patched_packet_send(original: Callable[..., Any]) -> Callable[..., Any]:
    def send(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if self.family == _AF_PACKET:
            raise _refusal(*_send_target(self, None))  # type: ignore[misc]
        return original(self, *args, **kwargs)

    send.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return send


def _patched_datagram_endpoint(original: Callable[..., Any]) -> Callable[..., Any]:
    async def create_datagram_endpoint(
        self: Any,
        protocol_factory: Any,
        local_addr: Any = None,
        remote_addr: Any = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(remote_addr, tuple) and len(remote_addr) >= 2:
            host, port = remote_addr[0], remote_addr[1]
            if not is_local_address(host):
                raise _refusal(host, port, _family_of(host))
        return await original(self, protocol_factory, local_addr, remote_addr, **kwargs)

    create_datagram_endpoint.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return create_datagram_endpoint


def _own_name(host: str) -> bool:
    """This machine's own host name (``socket.getfqdn`` of a server bound to 0.0.0.0 asks)."""
    try:
        return host.strip().lower().rstrip(".") == socket.gethostname().lower().rstrip(".")
    except OSError:
        return False


def _resolvable(host: Any) -> bool:
    """Whether looking ``host`` up needs no name server: a loopback name, this machine's
    name, or an IP literal."""
    if host is None or is_local_address(host):
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return True  # not a name: the resolver itself refuses it
    if _own_name(host):
        return True
    literal = host.strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        ipaddress.ip_address(literal)
    except ValueError:
        return False
    return True


def _patched_lookup(original: Callable[..., Any]) -> Callable[..., Any]:
    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _resolvable(host):
            raise _resolution_refusal(host)
        return original(host, *args, **kwargs)

    lookup.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return lookup


def _patched_reverse_lookup(original: Callable[..., Any]) -> Callable[..., Any]:
    def reverse_lookup(address: Any, *args: Any, **kwargs: Any) -> Any:
        host = address[0] if isinstance(address, tuple) and address else address
        if not is_local_address(host) and not (isinstance(host, str) and _own_name(host)):
            raise _resolution_refusal(host)  # any reverse lookup but loopback asks DNS
        return original(address, *args, **kwargs)

    reverse_lookup.__reproit_tripwire__ = True  # type: ignore[attr-defined]
    return reverse_lookup


_AF_PACKET: Any = getattr(socket, "AF_PACKET", object())

_PATCHES: tuple[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]], ...] = (
    (socket.socket, "connect", _patched_connect),
    (socket.socket, "connect_ex", _patched_connect_ex),
    (socket.socket, "sendto", _patched_sendto),
    (socket.socket, "sendmsg", _patched_sendmsg),
    (socket.socket, "send", _patched_packet_send),
    (socket.socket, "sendall", _patched_packet_send),
    (socket, "create_connection", _patched_create_connection),
    (socket, "getaddrinfo", _patched_lookup),
    (socket, "gethostbyname", _patched_lookup),
    (socket, "gethostbyname_ex", _patched_lookup),
    (socket, "gethostbyaddr", _patched_reverse_lookup),
    (socket, "getnameinfo", _patched_reverse_lookup),
    (asyncio.base_events.BaseEventLoop, "create_connection", _patched_loop_create_connection),
    (
        asyncio.base_events.BaseEventLoop,
        "create_datagram_endpoint",
        _patched_datagram_endpoint,
    ),
)


def install_tripwire() -> None:
    """Refuse connections to other hosts from now on (see the module doc). Idempotent."""
    with _lock:
        if _originals:
            return
        for owner, name, wrap in _PATCHES:
            original = getattr(owner, name)
            _originals[f"{id(owner)}.{name}"] = (name in vars(owner), original)
            setattr(owner, name, wrap(original))


def uninstall_tripwire() -> None:
    """Restore every patched function exactly; does nothing when not installed."""
    with _lock:
        for owner, name, _ in _PATCHES:
            saved = _originals.pop(f"{id(owner)}.{name}", None)
            if saved is None or not getattr(getattr(owner, name), "__reproit_tripwire__", False):
                continue  # not ours, or wrapped again by someone else since: left alone
            own, original = saved
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # socket.socket inherits connect from _socket.socket
        _originals.clear()


def tripwire_installed() -> bool:
    """True while the tripwire is in place."""
    return bool(getattr(socket.socket.connect, "__reproit_tripwire__", False))
