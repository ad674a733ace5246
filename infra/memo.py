"""Memos kept by one process of what every request reads and rarely changes, true at every request.

A labeling request is a few indexed row writes; reading the same rows again on every request
(the labeling settings, the logged-in user, their roles) cost as much as the work. A memo
keeps them, and answers only while they are unchanged everywhere: a save or delete of a row of
a model in settings.STEPWISE_MEMOIZED_MODELS (or a memo's `forget`) empties this process's memos
at once and renews a stamp kept in the cache every process shares (`caches["memo"]`: Redis, or
files without it), once the change commits; an entry made under another stamp is loaded again.
A request reads the stamp once, whatever memos it asks, so a revoked role or a deactivated user
is refused at the next request in every process. An entry also runs out after `seconds`, for
changes made where no signal is sent (QuerySet.update(), SQL). The signals are connected when
this module is imported, which the models that keep a memo do (annotate.models.project), so
every process started by Django, a shell's or a worker's too, tells the others of its changes.

While that cache cannot be reached (Redis down or unreachable), no
process can tell the others of a change, so memos answer nothing from memory: each request loads
what it reads, and a process that saw the outage empties its memos. A change made during the
outage renews the stamp at the first request after Redis is back.

What a memo hands out is the caller's own: a model instance is a new copy at each call (its
lists and dicts too), anything else must be immutable (a tuple, a frozenset, a NamedTuple) and is
refused otherwise, so no caller can change what the next one gets.
"""
from __future__ import annotations

import copy
import datetime as dt
import secrets
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

from django.conf import settings
from django.core.cache import caches
from django.core.signals import request_finished, request_started
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.signals import m2m_changed, post_delete, post_save
from redis.exceptions import RedisError

T = TypeVar("T")
_UNREACHABLE = (RedisError, OSError)  # Redis down or slow; the file-based cache's folder unwritable
_MEMOS: list[ProcessMemo] = []
_PACERS: list[Pacer] = []


class _SharedStamp:
    """A token every process reads from the shared cache, renewed whenever a memoized thing
    changes; read once per request (at its first memo) and at every call outside requests."""

    KEY = "changed"

    def __init__(self):
        self._local = threading.local()
        self._missed = threading.Event()  # a renewal the cache could not take

    def current(self) -> str:
        seen = getattr(self._local, "seen", None)
        if seen is not None:
            return seen
        try:
            stamp = self._read()
        except _UNREACHABLE:  # a stamp no entry is made under or matches
            stamp = f"unreachable:{secrets.token_hex(8)}"
            for memo in _MEMOS:
                memo.forget_here()
        if getattr(self._local, "in_request", False):
            self._local.seen = stamp
        return stamp

    def _read(self) -> str:
        cache = caches["memo"]
        if self._missed.is_set():  # back after an outage that a change in this process could not tell of
            cache.set(self.KEY, secrets.token_hex(8), timeout=None)
            self._missed.clear()
        stamp = cache.get(self.KEY)
        if stamp is None:  # A new or emptied cache: a stamp no entry was made under.
            cache.add(self.KEY, secrets.token_hex(8), timeout=None)
            stamp = cache.get(self.KEY)
        return stamp

    def renew(self) -> None:
        try:
            caches["memo"].set(self.KEY, secrets.token_hex(8), timeout=None)
        except _UNREACHABLE:
            self._missed.set()

    def request_started(self, **kwargs) -> None:
        self._local.in_request, self._local.seen = True, None

    def request_finished(self, **kwargs) -> None:
        self._local.in_request, self._local.seen = False, None


_stamp = _SharedStamp()
request_started.connect(_stamp.request_started, dispatch_uid="infra.memo.request_started")
request_finished.connect(_stamp.request_finished, dispatch_uid="infra.memo.request_finished")


class _Entry(NamedTuple):
    stamp: str
    expires: float  # time.monotonic()
    value: object


class ProcessMemo(Generic[T]):
    def __init__(self, seconds: float, max_entries: int = 10_000):
        self.seconds = seconds
        self.max_entries = max_entries
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()
        _MEMOS.append(self)

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The value for `key`, the caller's own copy; loaded again after any change or `seconds`."""
        stamp = _stamp.current()  # Read before a load, so a change committed during it renews the stamp after.
        entry = self._entries.get(key)
        now = time.monotonic()
        if entry is None or entry.stamp != stamp or now >= entry.expires:
            value = _frozen(load())
            with self._lock:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()  # Rare (that many users in one process); simpler than LRU.
                self._entries[key] = _Entry(stamp, now + self.seconds, value)
            return _copy(value)
        return _copy(entry.value)

    def forget(self, key: Hashable | None = None) -> None:
        """Drop one entry, or all of them, here at once and in every process from its next request."""
        self.forget_here(key)
        _tell_every_process()

    def forget_here(self, key: Hashable | None = None) -> None:
        """Drop one entry, or all of them, in this process only."""
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
        _PACERS.append(self)

    def due(self, now: dt.datetime, seconds: float) -> bool:
        """True (and counted as done at `now`) unless it was done less than `seconds` before
        `now`; a clock that went back makes it due."""
        with self._lock:
            if self._last is not None and dt.timedelta(0) <= now - self._last < dt.timedelta(seconds=seconds):
                return False
            self._last = now
            return True

    def forget_here(self, key: Hashable | None = None) -> None:
        self._last = None


def _frozen(value):
    """What a memo may keep: a model instance (handed out as copies) or an immutable value."""
    if isinstance(value, Model):
        return value
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"a memo keeps model instances or immutable values, not {type(value).__name__}") from None
    return value


def _copy(value):
    """A model instance's fields copied without the pickle protocol that copy.copy goes through
    (several times slower, and this runs on every request), its lists and dicts copied too;
    an immutable value as it is."""
    if not isinstance(value, Model):
        return value
    clone = value.__class__.__new__(value.__class__)
    clone.__dict__ = value.__dict__.copy()
    for name, held in clone.__dict__.items():
        if isinstance(held, dict | list | set):
            clone.__dict__[name] = copy.deepcopy(held)
    clone._state = ModelState()
    clone._state.db, clone._state.adding = value._state.db, value._state.adding
    return clone


def forget_all() -> None:
    """Every memo and pacer of this process emptied (tests start each case from the database)."""
    for memo in _MEMOS:
        memo.forget_here()
    for pacer in _PACERS:
        pacer.forget_here()


def _tell_every_process() -> None:
    """Renew the shared stamp; in a transaction once it commits: told sooner, another process
    could read the rows as they were before the change and keep them as new."""
    if connection.in_atomic_block:
        transaction.on_commit(_stamp.renew)
    else:
        _stamp.renew()


def _memoized_row_changed(action: str = "post_save", **kwargs) -> None:
    if action.startswith("post_"):  # m2m_changed sends pre_ and post_ of each change
        for memo in _MEMOS:
            memo.forget_here()
        _tell_every_process()


for _label in settings.STEPWISE_MEMOIZED_MODELS:
    for _signal in (post_save, post_delete, m2m_changed):
        _signal.connect(_memoized_row_changed, sender=_label, weak=False, dispatch_uid=f"infra.memo:{_label}")
