"""Where ``fetch_url`` may connect: public addresses only, unless the user allows more.

The web tools run in the user's own process, so a URL the model picked could reach what
only this machine can: a service on loopback, the cloud metadata service
(169.254.169.254), a router, a database on the private network. The host is resolved
here, *every* address it resolves to is checked, and the request then goes to the checked
address itself (the URL keeps its host for the ``Host`` header and TLS), so a DNS answer
that changes between the check and the connection (rebinding) cannot slip past. Any
spelling of an address counts as that address: ``2130706433``, ``0x7f.1`` and
``[::ffff:127.0.0.1]`` are loopback. ``Agent.web_allow_private`` turns the check off.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

from ..base import in_daemon_thread

__all__ = ["Refused", "Unresolved", "address_problem", "resolve_checked"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(Exception):
    """A URL ``fetch_url`` will not fetch; the message is one line saying why."""


class Unresolved(Exception):
    """A host name that did not resolve (in time); the message is one line."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, Teredo, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address ("loopback", "private", …), or None if it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            problem = address_problem(inner)
            if problem:
                return problem
    if ip.is_loopback:
        return "loopback (this machine)"
    if ip.is_link_local:
        return "link-local (e.g. the cloud metadata service)"
    if ip.is_unspecified:
        return "unspecified (this machine)"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in ipaddress.ip_network("fc00::/7"):
        return "unique-local (a private network)"
    if ip.is_private:
        return "private (the local network)"
    if ip.is_reserved or not ip.is_global:
        return "reserved or not globally routable"
    return None


def _lookup(host: str, port: int) -> asyncio.Future[Any]:
    """``getaddrinfo`` in a daemon thread (a resolver that hangs never keeps Python from exiting)."""
    return in_daemon_thread(socket.getaddrinfo, {"host": host, "port": port, "type": socket.SOCK_STREAM})


async def resolve_checked(host: str, port: int, *, allow_private: bool,
                          timeout: float | None) -> list[str]:
    """The addresses to connect to for ``host``, in the resolver's order (no repeats); ``Unresolved`` when it resolves to none,
    ``Refused`` when any address it resolves to is not public (unless ``allow_private``)."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await asyncio.wait_for(_lookup(host, port), timeout or None)
        except asyncio.TimeoutError:
            raise Unresolved(f"the name {host!r} did not resolve within {timeout:g} s") from None
        except (socket.gaierror, UnicodeError, OSError) as exc:
            raise Unresolved(f"the name {host!r} does not resolve "
                             f"({exc.args[-1] if exc.args else exc})") from None
        addresses = []
        for info in infos:
            text = str(info[4][0]).split("%", 1)[0]  # an IPv6 zone id is not part of it
            try:
                addresses.append(ipaddress.ip_address(text))
            except ValueError:
                continue
        if not addresses:
            raise Unresolved(f"the name {host!r} resolves to no usable address")
    if not allow_private:
        for ip in addresses:
            problem = address_problem(ip)
            if problem:
                shown = host if literal is not None else f"{host} ({ip})"
                raise Refused(f"{shown} is a {problem} address; fetch_url reaches only public "
                              "addresses (Agent.web_allow_private = True allows the others)")
    return list(dict.fromkeys(str(ip) for ip in addresses))
