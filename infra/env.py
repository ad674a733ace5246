"""Reading settings from the environment: each helper names the variable when its value is bad.

Django-free (only ImproperlyConfigured, which imports nothing else), so `config/settings.py`
parses every value at start-up: a typo in a variable stops the process at once, not an
hour later inside a worker (a misspelled selection share used to leave every rescore
`running`).
"""
from __future__ import annotations

import os
from collections.abc import Collection
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import NamedTuple, overload

from django.core.exceptions import ImproperlyConfigured


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return _env_number(name, default, int, "an integer", minimum)


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, "a number", minimum)


def _env_number(name: str, default, convert, kind: str, minimum):
    value = env_str(name)
    if value is None:
        return default
    try:
        number = convert(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not {kind}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}")
    return number


def env_list(name: str, default: str = "") -> list[str]:
    """A comma-separated list, each item stripped, empty ones dropped ("a, b," -> ["a", "b"])."""
    return [item.strip() for item in (env_str(name, default) or "").split(",") if item.strip()]


def env_networks(name: str) -> tuple[IPv4Network | IPv6Network, ...]:
    """Comma-separated addresses or CIDR ranges ("10.0.0.1, 172.16.0.0/12"), none by default."""
    try:
        return tuple(ip_network(item, strict=False) for item in env_list(name))
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from None


def env_choice(name: str, default: str, choices: Collection[str]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: use {', '.join(choices)}")
    return value


# A rate's periods and their length in seconds; a rate may spell its period short ("5/m", "5/min").
RATE_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


class Rate(NamedTuple):
    count: int  # type: ignore[assignment]  # requests allowed per window (the field hides tuple.count)
    seconds: int  # the window's length


def parse_rate(text: str) -> Rate:
    """'20/minute' -> Rate(20, 60), as DRF's throttles read a rate; names the text when it is not one."""
    count, _, period = text.partition("/")
    seconds = next((s for name, s in RATE_PERIODS.items() if period and name.startswith(period)), None)
    if not (count.isdigit() and int(count) > 0 and seconds):
        raise ValueError(f"{text!r} is not a rate (use N/second, N/minute, N/hour or N/day)")
    return Rate(int(count), seconds)


def env_rate(name: str, default: str) -> str:
    """A request rate as DRF's throttles read it: "N/second", "N/minute", "N/hour" or "N/day"."""
    value = env_str(name, default) or ""
    try:
        parse_rate(value)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}={error}") from None
    return value


def parse_shares(text: str, reasons: Collection[str] | None = None) -> dict[str, float]:
    """'convincing_wrong=0.4,random=0.6' -> shares normalised to sum 1; names the bad part.

    The names are the caller's (selection's reasons are scoring's, scoring/rescoring/selection.py):
    with `reasons`, a name outside them is refused; without, only the numbers are checked.
    """
    shares: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = (s.strip() for s in part.partition("="))
        if reasons is not None and name not in reasons:
            raise ValueError(f"selection share {part!r}: unknown reason {name!r} (use {', '.join(reasons)})")
        try:
            shares[name] = float(value)
        except ValueError:
            raise ValueError(f"selection share {part!r}: {value!r} is not a number") from None
        if shares[name] < 0:
            raise ValueError(f"selection share {part!r} is negative")
    total = sum(shares.values())
    if total <= 0:
        raise ValueError(f"selection shares {text!r} sum to zero")
    return {name: value / total for name, value in shares.items()}


def env_shares(name: str, default: str, reasons: Collection[str] | None = None) -> dict[str, float]:
    """Selection shares from the environment, parsed and normalised now (the names against
    `reasons` when given; the settings leave them to the app that owns them)."""
    try:
        return parse_shares(env_str(name, default) or "", reasons)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from None
