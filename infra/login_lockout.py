"""Login lockout that a shared address or a known user name cannot turn against real users.

django-axes counts wrong passwords per (user name, address). Alone that leaves two holes: behind
a proxy or NAT everyone shares one address, so whoever knows a user name can keep that user out;
and one address may try a password against every user name (spraying), one failure per pair.
This handler (``AXES_HANDLER``) closes both, after OWASP's "device cookies":

- **Known devices.** A browser that logged in as a user gets a signed cookie naming that user
  (``DEVICE_COOKIE``, set by the login views wrapped in ``remembers_device``). Its attempts at
  that user name are counted per device, not per address: someone else's failures never lock it
  out, and its own lock only itself, after as many failures as a pair gets.
- **Per address.** Failures from one address are also summed over every user name in the
  lockout window; past ``STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT`` the address is refused (429) for
  any user name it holds no device cookie for.
- **Per account.** Wrong passwords tried against one user name are also summed over every
  address for an hour (``ACCOUNT_WINDOW_SECONDS``); past ``STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR``
  that user name is refused (429) to every browser but its known devices, so many addresses
  together cannot try more than that many passwords an hour. Only passwords actually checked
  are counted (one row each in axes' ``AccessFailureLog``, kept for the window), not attempts
  refused unchecked.
- **Growing delays.** Past ``FREE_FAILURES`` failures a (user name, address) pair waits before
  its next attempt: 1 s, then twice as long after each failure, at most the lockout window
  (429 with Retry-After; an attempt made while waiting counts as a failure too). A known device
  is judged by its own count and never waits for the pair.

The address is infra/client_address.py's (``AXES_CLIENT_IP_CALLABLE``), in
``request.axes_ip_address``.

Device counts are infra/counter.py's (Redis, shared by every web process), failing closed:
while they cannot be read, a known device is judged as an unknown one, by the counts in the
database (the pair's, the address's and the account's in axes' tables), which need no Redis.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
import secrets
from collections.abc import Callable
from functools import wraps

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_lockout_message
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core import signing
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone

from infra import counter

DEVICE_COOKIE = "stepwise_device"
DEVICE_SECONDS = 180 * 86400  # a device unused for this long is unknown again
DEVICE_USERS = 8  # user names one browser is known for (a shared lab machine)
_SALT = "infra.login_lockout.device"
_PENDING = "stepwise_device_cookie"  # the request attribute the login view's wrapper reads
_RETRY_AFTER = "stepwise_retry_after"  # seconds a delayed pair waits, for lockout_response
FREE_FAILURES = 3  # a pair's failures before the growing delays start (typos, a forgotten caps lock)
ACCOUNT_WINDOW_SECONDS = 3600  # STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR counts in this window
_REFUSED = "stepwise_login_refused"  # the request attribute saying no password was checked
_DEVICE = "stepwise_device_failures"  # the request attribute caching (device key, its failures)


class LoginLockoutHandler(AxesDatabaseHandler):
    """axes' database handler, counting known devices apart and failures per address and per
    account too."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        """The failures this attempt is judged by, against ``AXES_FAILURE_LIMIT``: the device's own
        for a known device; else the (user name, address) pair's, or the limit itself once the
        address is over its limit across user names or the account over its ceiling."""
        device = _known_device(request, credentials)
        if device is not None:
            return device[1]
        failures = super().get_failures(request, credentials)
        if (_address_failures(request) >= settings.STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT
                or _account_failures(request, credentials) >= settings.STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR):
            return max(failures, settings.AXES_FAILURE_LIMIT)
        return failures

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        """Locked out (``get_failures``), or a pair still waiting out its growing delay."""
        if super().is_locked(request, credentials):
            setattr(request, _REFUSED, True)
            return True
        wait = _pair_delay(request, credentials)
        if wait <= 0:
            return False
        setattr(request, _REFUSED, True)
        # axes flags a lockout for its middleware only once the failures reach the limit.
        request.axes_locked_out, request.axes_credentials = True, credentials
        setattr(request, _RETRY_AFTER, wait)
        return True

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        if request is not None and not getattr(request, _REFUSED, False):  # a password was checked
            _record_account_failure(request, credentials)
            _count_device_failure(request, credentials)
        super().user_login_failed(sender, credentials, request, **kwargs)

    def reset_user_attempts(self, request, credentials: dict | None = None) -> int:
        """After a login (AXES_RESET_ON_SUCCESS): a known device clears its own count only. The
        pair's failures may be an attacker's behind the same NAT, who must not get a fresh try
        each time the real user logs in."""
        device = _known_device(request, credentials)
        if device is None:
            return super().reset_user_attempts(request, credentials)
        counter.forget(device[0])
        return 0

    def user_logged_in(self, sender, request, user, **kwargs) -> None:
        super().user_logged_in(sender, request, user, **kwargs)
        nonce, usernames = _read_device(request)
        nonce = nonce or secrets.token_urlsafe(18)
        username = user.get_username()
        remembered = [name for name in usernames if name != username][-(DEVICE_USERS - 1):] + [username]
        setattr(request, _PENDING, signing.dumps({"d": nonce, "u": remembered}, salt=_SALT, compress=True))


def remembers_device(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """A login view that, when it logged someone in, leaves the device cookie with its answer."""

    @wraps(view)
    def login_view(request: HttpRequest, *args, **kwargs) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        value = getattr(request, _PENDING, None)
        if value:
            response.set_cookie(DEVICE_COOKIE, value, max_age=DEVICE_SECONDS, secure=settings.SESSION_COOKIE_SECURE,
                                httponly=True, samesite="Lax")
        return response

    return login_view


def lockout_response(request, original_response=None, credentials: dict | None = None) -> HttpResponse:
    """axes' 429 (``AXES_LOCKOUT_CALLABLE``), saying how long to wait: a pair's delay, else the
    lockout window, which runs from this attempt (it counted as a failure)."""
    response = HttpResponse(get_lockout_message(), status=429)
    wait = getattr(request, _RETRY_AFTER, 0)
    if not wait or getattr(request, "axes_failures_since_start", 0) >= settings.AXES_FAILURE_LIMIT:
        wait = settings.AXES_COOLOFF_TIME.total_seconds()  # this attempt, counted, reached the lockout
    response["Retry-After"] = str(math.ceil(wait))
    return response


def _read_device(request) -> tuple[str | None, list[str]]:
    """The device cookie's (nonce, user names), or (None, []) without a valid one."""
    value = getattr(request, "COOKIES", {}).get(DEVICE_COOKIE)
    if not value:
        return None, []
    try:
        data = signing.loads(value, salt=_SALT, max_age=DEVICE_SECONDS)
        return str(data["d"]), [str(name) for name in data["u"]]
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return None, []


def _known_device(request, credentials: dict | None) -> tuple[str, int] | None:
    """(the failure counter's key, its failures) of this device for the user name tried, if the
    device is known for that name and its count can be read (fail closed: else None, and the
    attempt is judged by the database's counts as an unknown device's). Read once per request."""
    username = get_client_username(request, credentials)
    cached = getattr(request, _DEVICE, None)
    if cached is not None and cached[0] == username:
        return cached[1]
    nonce, usernames = _read_device(request)
    device = None
    if nonce is not None and username and username in usernames:
        key = _failures_key(nonce, username)
        try:
            device = (key, counter.read(key, fail_open=False))
        except counter.CounterUnavailable:
            device = None
    setattr(request, _DEVICE, (username, device))
    return device


def _failures_key(nonce: str, username: str) -> str:
    digest = hashlib.sha256(f"{nonce}\0{username}".encode()).hexdigest()
    return f"stepwise:login-device:{digest}"


def _count_device_failure(request, credentials: dict | None) -> None:
    """One more failure of a known device; its window runs from its last failure, as axes' does."""
    device = _known_device(request, credentials)
    if device is None:
        return
    try:
        failures = counter.add_one(device[0], seconds=int(settings.AXES_COOLOFF_TIME.total_seconds()),
                                   fail_open=False, window_from_last=True)
    except counter.CounterUnavailable:
        # Uncounted here, but counted in the database as every failure is (pair, address, account),
        # and judged by those from now on.
        failures = None
    username = get_client_username(request, credentials)
    setattr(request, _DEVICE, (username, None if failures is None else (device[0], failures)))


def _record_account_failure(request, credentials: dict | None) -> None:
    """A checked wrong password against the user name, whatever the address; rows older than
    the window go, so the table holds at most an hour of each account's failures."""
    username = get_client_username(request, credentials)
    if not username:
        return
    AccessFailureLog.objects.filter(username=username, attempt_time__lt=_account_window_start()).delete()
    AccessFailureLog.objects.create(
        username=username, ip_address=request.axes_ip_address, user_agent=request.axes_user_agent[:255],
        http_accept=request.axes_http_accept[:1025], path_info=request.axes_path_info[:255],
    )


def _account_failures(request, credentials: dict | None) -> int:
    """Checked wrong passwords against the user name in the last hour, from every address."""
    username = get_client_username(request, credentials)
    if not username:
        return 0
    return AccessFailureLog.objects.filter(username=username, attempt_time__gte=_account_window_start()).count()


def _account_window_start():
    return timezone.now() - dt.timedelta(seconds=ACCOUNT_WINDOW_SECONDS)


def _address_failures(request) -> int:
    """Wrong passwords from the request's address in the lockout window, whatever the user name."""
    attempts = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address, attempt_time__gte=get_cool_off_threshold(request)
    )
    return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0


def _pair_delay(request, credentials: dict | None) -> float:
    """Seconds the (user name, address) pair must still wait after its last failure: none up to
    ``FREE_FAILURES`` failures, then 1, 2, 4 ... at most the lockout window; none for a known device."""
    if _known_device(request, credentials) is not None:
        return 0.0
    attempts = AccessAttempt.objects.filter(
        username=get_client_username(request, credentials), ip_address=request.axes_ip_address,
        attempt_time__gte=get_cool_off_threshold(request),
    ).aggregate(n=Sum("failures_since_start"), last=Max("attempt_time"))
    failures = attempts["n"] or 0
    if failures <= FREE_FAILURES:
        return 0.0
    window = settings.AXES_COOLOFF_TIME.total_seconds()
    delay = min(2.0 ** min(failures - FREE_FAILURES - 1, 64), window)
    return max(0.0, (attempts["last"] - timezone.now()).total_seconds() + delay)
