"""One rule for per-user rates (infra/throttling.py), in the cache all web processes share."""
import threading
import uuid

import pytest
from django.conf import settings

from infra import throttling
from infra.env import parse_rate


def fresh_user() -> str:
    return uuid.uuid4().hex  # The shared cache outlives test databases: a key nobody used.


@pytest.mark.embedded
def test_a_rate_allows_its_count_per_window_then_says_how_long_to_wait():
    user = fresh_user()
    verdicts = [throttling.check("test", user, (3, 60), fail_open=True) for _ in range(4)]
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert 0 < verdicts[-1].retry_after <= 60


@pytest.mark.embedded
def test_users_and_scopes_are_counted_apart():
    user, other = fresh_user(), fresh_user()
    assert throttling.check("test", user, (1, 3600), fail_open=True).allowed
    assert not throttling.check("test", user, (1, 3600), fail_open=True).allowed
    assert throttling.check("test", other, (1, 3600), fail_open=True).allowed
    assert throttling.check("other-scope", user, (1, 3600), fail_open=True).allowed


def test_concurrent_requests_are_all_counted():
    """With Redis; the file-based fallback's increment is read-then-write (infra/counter.py)."""
    if not settings.REDIS_URL:
        pytest.skip("atomic counts need Redis (REDIS_URL); under CI=true this fails")
    user, allowed = fresh_user(), []
    barrier = threading.Barrier(20)

    def one():
        barrier.wait()
        allowed.append(throttling.check("test", user, (5, 60), fail_open=True).allowed)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert allowed.count(True) == 5 and len(allowed) == 20


def test_a_rate_is_read_once_for_settings_and_throttles():
    assert [parse_rate(text) for text in ("20/minute", "5/m", "5/min", "1/s", "100/day")] == [
        (20, 60), (5, 60), (5, 60), (1, 1), (100, 86400)]


@pytest.mark.parametrize("text", ["ten/minute", "0/minute", "10/fortnight", "10", "10/", "10/minutes"])
def test_a_rate_that_is_not_one_is_refused_by_name(text):
    with pytest.raises(ValueError, match=f"{text!r} is not a rate"):
        parse_rate(text)
