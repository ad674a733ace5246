"""The login lockout's per-account ceiling (infra/login_lockout.py): many addresses together get
no more than STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR checked passwords against one user name an
hour, while a browser that logged in as that user before still gets in; and a lockout that does
not depend on Redis being up."""
import datetime as dt

import pytest
from axes.models import AccessFailureLog
from django.utils import timezone

from tests.config.test_security import PASSWORD, log_out, new_browser, post_login
from tests.factories import user_with_role


def spray(username: str, addresses: int, tries: int) -> list[int]:
    """`tries` wrong passwords from each of `addresses` addresses, as a botnet would: statuses."""
    return [post_login(new_browser(f"203.0.113.{a}"), "/accounts/login/", username, f"guess-{a}-{t}",
                       f"203.0.113.{a}").status_code
            for a in range(addresses) for t in range(tries)]


@pytest.mark.embedded
@pytest.mark.django_db
def test_many_addresses_together_get_no_more_checked_passwords_than_the_accounts_ceiling(settings):
    settings.STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR = 12
    user_with_role("admin2", "admin", is_staff=True, is_superuser=True)
    own = new_browser("198.51.100.1")
    assert post_login(own, "/accounts/login/", "admin2", PASSWORD, "198.51.100.1").status_code == 302
    log_out(own)

    statuses = spray("admin2", addresses=20, tries=7)
    # 140 tries, 12 passwords checked (one row each); every try after the ceiling refused unchecked.
    assert AccessFailureLog.objects.filter(username="admin2").count() == 12
    assert 200 in statuses and set(statuses[statuses.index(429, 7 * 3):]) == {429}
    # The right password from a new address or browser is refused too, for the rest of the hour ...
    assert post_login(new_browser("198.51.100.2"), "/accounts/login/", "admin2", PASSWORD,
                      "198.51.100.2").status_code == 429
    # ... but not from the browser that logged in before, and other accounts are untouched.
    assert post_login(own, "/accounts/login/", "admin2", PASSWORD, "198.51.100.1").status_code == 302
    user_with_role("kim", "annotator")
    assert post_login(new_browser("203.0.113.1"), "/accounts/login/", "kim", PASSWORD, "203.0.113.1").status_code == 302


@pytest.mark.django_db
def test_the_accounts_ceiling_counts_the_last_hour_only(settings):
    settings.STEPWISE_LOGIN_ACCOUNT_FAILURES_PER_HOUR = 3
    user_with_role("kim", "annotator")
    spray("kim", addresses=3, tries=1)
    assert post_login(new_browser("198.51.100.3"), "/accounts/login/", "kim", PASSWORD,
                      "198.51.100.3").status_code == 429
    AccessFailureLog.objects.update(attempt_time=timezone.now() - dt.timedelta(minutes=61))
    assert post_login(new_browser("198.51.100.4"), "/accounts/login/", "kim", PASSWORD,
                      "198.51.100.4").status_code == 302
    # The next failure drops what is older than the window: the table holds an hour per account.
    spray("kim", addresses=1, tries=1)
    assert AccessFailureLog.objects.filter(username="kim").count() == 1


@pytest.mark.django_db
def test_with_redis_away_logins_work_and_stay_locked_by_the_databases_counts(redis_stopped, settings):
    user_with_role("kim", "annotator")
    own = new_browser("198.51.100.5")
    assert post_login(own, "/accounts/login/", "kim", PASSWORD, "198.51.100.5").status_code == 302
    log_out(own)
    # The known browser's own count is out of reach: it is judged as any browser at its address is.
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert post_login(own, "/accounts/login/", "kim", "wrong", "198.51.100.5").status_code == 200
    assert post_login(own, "/accounts/login/", "kim", "wrong", "198.51.100.5").status_code == 429
    assert post_login(new_browser("198.51.100.6"), "/accounts/login/", "kim", PASSWORD,
                      "198.51.100.6").status_code == 302
