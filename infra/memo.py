"""Time-bounded memos kept by one process: what every request reads and rarely changes.

A labeling request is a few indexed row writes; reading the same rows again on every request
(the labeling settings, the logged-in user) cost as much as the work. A memo answers for at most
`seconds`; a change made in this process forgets its entry at once (the models' signals), other
processes see it when their entry runs out. Values are copied out, so a caller that changes
what it got changes nobody else's.
"""
from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django.db.models import Model
from django.db.models.base import ModelState

T = TypeVar("T")
_ALL: list[ProcessMemo | Pacer] = []


class ProcessMemo(Generic[T]):
    def __init__(self, seconds: float, max_entries: int = 10_000):
        self.seconds = seconds
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, T]] = {}
        self._lock = threading.Lock()
        _ALL.append(self)

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """A copy of the value for `key`, loaded again once it is older than `seconds`."""
        entry = self._entries.get(key)
        now = time.monotonic()
        if entry is None or now >= entry[0]:
            value = load()
            with self._lock:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()  # Rare (that many users in one process); simpler than LRU.
                self._entries[key] = (now + self.seconds, value)
            return _copy(value)
        return _copy(entry[1])

    def forget(self, key: Hashable | None = None) -> None:
        """Drop one entry, or all of them."""
        with self._lock:
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(key, None)


class Pacer:
    """Whether a chore done at most once per some seconds of the caller's clock is due, in this
    process; emptied by `forget_all` like the memos."""

    def __init__(self):
        self._last: dt.datetime | None = None
        self._lock = threading.Lock()
        _ALL.append(self)

    def due(self, now: dt.datetime, seconds: float) -> bool:
        """True (and counted as done at `now`) unless it was done less than `seconds` before
        `now`; a clock that went back makes it due."""
        with self._lock:
            if self._last is not None and dt.timedelta(0) <= now - self._last < dt.timedelta(seconds=seconds):
                return False
            self._last = now
            return True

    def forget(self, key: Hashable | None = None) -> None:
        self._last = None


def _copy(value):
    """A model instance's fields copied without the pickle protocol that copy.copy goes through
    (several times slower, and this runs on every request); anything else by copy.copy."""
    if isinstance(value, Model):
        clone = value.__class__.__new__(value.__class__)
        clone.__dict__ = value.__dict__.copy()
        clone._state = ModelState()
        clone._state.db, clone._state.adding = value._state.db, value._state.adding
        return clone
    return copy.copy(value)


def forget_all() -> None:
    """Every memo of this process emptied (tests start each case from the database)."""
    for memo in _ALL:
        memo.forget()
