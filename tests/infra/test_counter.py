"""The one cache counter (infra/counter.py): what rates and a known device's failures are counted
by, and what each caller gets while the store of counts is unreachable."""
import uuid

import pytest

from infra import counter, throttling


def fresh_key() -> str:
    return f"test:{uuid.uuid4().hex}"  # the shared cache outlives test databases


@pytest.mark.embedded
def test_counts_add_up_per_key_and_a_forgotten_key_starts_again():
    key, other = fresh_key(), fresh_key()
    assert [counter.add_one(key, seconds=60, fail_open=True) for _ in range(3)] == [1, 2, 3]
    assert counter.add_one(other, seconds=60, fail_open=False) == 1
    assert counter.read(key, fail_open=False) == 3
    counter.forget(key)
    assert counter.read(key, fail_open=False) == 0


def test_an_outage_counts_nothing_when_open_and_raises_when_closed(redis_stopped):
    key = fresh_key()
    assert counter.add_one(key, seconds=60, fail_open=True) == 0
    assert counter.read(key, fail_open=True) == 0
    with pytest.raises(counter.CounterUnavailable):
        counter.add_one(key, seconds=60, fail_open=False)
    with pytest.raises(counter.CounterUnavailable):
        counter.read(key, fail_open=False)
    counter.forget(key)  # nothing to forget where nothing can be reached, and no error


def test_an_outage_lets_labeling_rates_on_and_refuses_what_guards_credentials(redis_stopped):
    user = uuid.uuid4().hex
    assert all(throttling.check("heartbeat", user, (1, 60), fail_open=True).allowed for _ in range(5))
    refused = throttling.check("bad-token", user, (100, 600), fail_open=False)
    assert not refused.allowed and refused.retry_after == throttling.OUTAGE_RETRY_SECONDS

