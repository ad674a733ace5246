"""The client's address: the one place that decides which address a request came from.

Behind a reverse proxy every request's socket address (``REMOTE_ADDR``) is the proxy's, and the
client's is in ``X-Forwarded-For``, which each proxy extends with the address it was reached
from. Anyone can send that header, so it is read only when the request came from a proxy named
in ``STEPWISE_TRUSTED_PROXIES``, and then from the right: the first address that is not a
trusted proxy is the one our own proxies saw, the client (anything left of it was written by
the client and may be forged). Without trusted proxies the socket address is the client.

Login lockout (``AXES_CLIENT_IP_CALLABLE``, hence ``request.axes_ip_address`` in
infra/login_lockout.py), the API's throttles (infra/throttling.py) and the wrong-token limit
(infra/auth.py) all count by this address.
"""
from __future__ import annotations

from ipaddress import ip_address

from django.conf import settings


def client_address(request) -> str:
    """The address ``request`` (Django's or DRF's) came from, as set out in the module docstring."""
    address = request.META.get("REMOTE_ADDR", "")
    if not _is_trusted_proxy(address):
        return address
    for hop in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        hop = _normal(hop)
        if hop is None:
            break  # not an address: the proxy that passed it on is as far as we can tell
        address = hop
        if not _is_trusted_proxy(hop):
            break
    return address


def _normal(text: str) -> str | None:
    try:
        return str(ip_address(text.strip()))
    except ValueError:
        return None


def _is_trusted_proxy(address: str) -> bool:
    proxies = settings.STEPWISE_TRUSTED_PROXIES
    if not proxies or _normal(address) is None:
        return False
    parsed = ip_address(address.strip())
    return any(parsed in network for network in proxies)
