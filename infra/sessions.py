"""Sessions in the database, read through the Redis cache (``SESSION_ENGINE`` when ``REDIS_URL`` is set).

Django's ``cached_db`` store with one addition. Its cache (``CACHES["sessions"]``, django-redis
with IGNORE_EXCEPTIONS) reads as a miss and writes as nothing while Redis is down, so every
request is served from the database then. But a logout or a session change made during the
outage reaches the database only: once Redis is back its old copy would be read again (a logged-out
session alive until its expiry). Django's store cannot know; this one sees the write fail
(django-redis answers None instead of a boolean) and drops every cached session at its first
request once Redis answers again, so the database's copies are read and cached afresh. A
process stopped before Redis is back takes that knowledge with it: an outage spanning a restart
of every web process can still leave such a copy, until its session's expiry.
"""
from __future__ import annotations

import threading
from typing import Any

from django.contrib.sessions.backends import cached_db
from django.contrib.sessions.backends.db import SessionStore as DBStore

_missed = threading.Event()  # this process changed a session that the cache could not be told of


class SessionStore(cached_db.SessionStore):
    _cache: Any  # django-redis' RedisCache (set by cached_db's __init__)

    def load(self):
        if _missed.is_set() and self._cache.delete_pattern("*") is not None:  # Redis answers again
            _missed.clear()
        return super().load()

    def save(self, must_create: bool = False) -> None:
        DBStore.save(self, must_create)
        if self._cache.set(self.cache_key, dict(self.items()), self.get_expiry_age()) is None:
            _missed.set()

    def delete(self, session_key: str | None = None) -> None:
        DBStore.delete(self, session_key)
        session_key = session_key or self.session_key
        if session_key is not None and self._cache.delete(self.cache_key_prefix + session_key) is None:
            _missed.set()
