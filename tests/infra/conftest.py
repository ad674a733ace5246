"""Fixtures of the ground floor's tests."""
import pytest
from django.core.cache import caches
from redis.exceptions import ConnectionError as RedisConnectionError


class Unreachable:
    """A cache whose every operation fails as django-redis' does with Redis stopped."""

    def close(self, **kwargs) -> None:  # at the end of each request: no network (django-redis)
        pass

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return fail


@pytest.fixture
def redis_stopped(monkeypatch):
    """This thread's `caches["throttle"]` replaced by one that cannot reach its server."""
    monkeypatch.setattr(caches._connections, "throttle", Unreachable(), raising=False)
