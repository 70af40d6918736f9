"""Name lookups bounded by a deadline: the system resolver on a thread of its own.

`socket.getaddrinfo` has no deadline and cannot be interrupted, so the HTTP
client (http_client.py) looks a host name up on a helper thread and waits for
it only until its request's deadline or its abort. A lookup that outlives
its request runs on until the resolver gives up, touching nothing; requests
for the same name meanwhile wait on it instead of starting another, so a
dead resolver holds one thread per name. An IP address needs no lookup.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["AddrInfo", "resolve"]

AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]


class _Lookup:
    """One `getaddrinfo` on its own thread: its result or error once `done` is set."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.done = threading.Event()
        self.result: Sequence[AddrInfo] = ()
        self.error: BaseException | None = None
        self._address = address

    def run(self) -> None:
        try:
            self.result = socket.getaddrinfo(*self._address, 0, socket.SOCK_STREAM)
        except BaseException as e:  # handed to whoever waits; nothing is raised on this thread
            self.error = e
        finally:
            with _LOOKUPS_LOCK:
                if _LOOKUPS.get(self._address) is self:
                    del _LOOKUPS[self._address]
            self.done.set()


_LOOKUPS: dict[tuple[str, int], _Lookup] = {}
_LOOKUPS_LOCK = threading.Lock()
_POLL_S = 0.05  # how often a wait for a lookup looks at the abort handle


def resolve(
    address: tuple[str, int], deadline: float, woken: threading.Event
) -> Sequence[AddrInfo] | None:
    """`getaddrinfo` of (host, port) by the monotonic `deadline`; an IP address without a thread.

    A TimeoutError when the deadline passes first; None when `woken` is set
    during the wait (the request was aborted). The lookup itself is not
    stopped (the resolver cannot be): it finishes on its thread, and a
    request for the same name meanwhile waits on it.
    """
    host, port = address
    if _is_ip(host):
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    with _LOOKUPS_LOCK:
        lookup = _LOOKUPS.get(address)
        if lookup is None:
            lookup = _LOOKUPS[address] = _Lookup(address)
            threading.Thread(target=lookup.run, name="name-lookup", daemon=True).start()
    while not lookup.done.wait(min(_POLL_S, max(0.0, deadline - time.monotonic()))):
        if woken.is_set():
            return None
        if time.monotonic() >= deadline:
            raise TimeoutError("the name lookup did not finish by the deadline")
    if lookup.error is not None:
        raise lookup.error
    return lookup.result


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) kept apart
    except ValueError:
        return False
    return True
