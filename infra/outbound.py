"""Outbound URLs: the one check a server address passes before Stepwise stores it or calls it.

Generators (`scoring.generation.generators.check_spec`) and remote scorers
(`scoring.store.remote_scorer.RemoteConfig`) call servers whose address an admin typed, from
a worker that may run in a cloud where the instance's credentials are one GET away (the
metadata service at 169.254.169.254). So a URL is `http` or `https`, carries no user:password
(it is stored and shown; keys go in an environment variable), and its host is neither
link-local (169.254.0.0/16, fe80::/10) nor a cloud metadata service, by name, by literal
address or by what the name resolves to, unless `STEPWISE_OUTBOUND_ALLOW` lists the host.

The clients follow no redirect (each says how), so a checked URL cannot hand the request,
and its key, on to an unchecked one. Django only for that one setting, read when configured.
"""
from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Collection

from django.conf import settings

SCHEMES = ("http", "https")
LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
# Metadata services outside the link-local ranges: AWS's IPv6 endpoint, Alibaba Cloud's.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))
# Their names, refused even where they do not resolve (the check may run off the cloud).
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal"})
# The shapes inet_aton reads as IPv4 ("2852039166", "0xa9.0xfe.0xa9.0xfe", "169.254.43518"): the
# connection would reach the address they spell, so they are read as it will read them.
_LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_url(url: str, *, allow: Collection[str] | None = None) -> str:
    """`url` unchanged when Stepwise may call it; else ValueError naming the problem.

    `allow`: hosts exempt from the address check (default: the STEPWISE_OUTBOUND_ALLOW setting).
    """
    if not isinstance(url, str) or not url.strip():
        raise ValueError("a server URL is required")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"{url!r}: only http:// and https:// URLs are called, not {parts.scheme or 'a bare host'}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r}: no user or password in the URL (it is stored and shown); "
                         "put the key in the environment variable the config names")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ValueError(f"{url!r} names no host")
    try:
        parts.port  # noqa: B018  # the property raises on a port that is not a number in range
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 0 to 65535") from None
    if host.lower() in {h.lower() for h in (_allowed() if allow is None else allow)}:
        return url
    problem = forbidden_reason(host)
    if problem:
        raise ValueError(f"{url!r}: {host} is {problem}; Stepwise calls none unless STEPWISE_OUTBOUND_ALLOW "
                         f"lists the host")
    return url


def forbidden_reason(host: str) -> str | None:
    """Why Stepwise must not call `host` ("a link-local address", ...), or None when it may."""
    if host.lower().rstrip(".") in METADATA_HOSTS:
        return "a cloud metadata service"
    for address in _addresses(host):
        if address in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if any(address in network for network in LINK_LOCAL):
            return f"a link-local address ({address})"
    return None


def _addresses(host: str) -> list[Address]:
    """What a connection to `host` may reach: the literal it is, else what the name resolves to now.

    A name that does not resolve here passes (the worker may see another DNS); the address it
    resolves to there is beyond this check, as is a name re-pointed after it (DNS rebinding).
    """
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    found = (_literal(str(info[4][0])) for info in infos)
    return [address for address in found if address is not None]


def _literal(host: str) -> Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") is no part of it
    except ValueError:
        if not _LEGACY_IPV4.fullmatch(host):
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:169.254.169.254 reaches the IPv4 address
    return address


def _allowed() -> Collection[str]:
    return getattr(settings, "STEPWISE_OUTBOUND_ALLOW", ()) if settings.configured else ()
