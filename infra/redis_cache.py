"""Django's Redis cache backend, keeping one client per connection pool.

Django's RedisCacheClient builds a new `redis.Redis` for every operation, and each one fills a
table of about 80 response callbacks: on the labeling hot path (a session read per request) that
was a measurable share of a rating's CPU. A `redis.Redis` is safe to share between threads (it
takes a connection from its pool for each command), so one per pool serves them all.
"""
from typing import Any

from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient
