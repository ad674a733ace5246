"""The labeling fast path's one way to the database below the ORM: statements the ORM builds once
per database connection and afterwards only executes, and rows written by primary key.

On the labeling path a request is a few indexed reads and writes, and building their SQL from a
QuerySet (resolving names and joins, compiling) cost the ORM more Python than anything else the
request did: about 0.3-0.5 ms a statement. A `Compiled` statement is a function of integer
arguments (or datetimes, named as such) that returns a QuerySet (a query) or
`updating(queryset, ...)` (an update); the ORM
builds it once per connection with a distinct placeholder number for each argument, and each
call runs the same SQL text with the real arguments in their places. The rows pass through
the ORM's own converters (dates, JSON, booleans), so a caller gets what the QuerySet would have
given, and PostgreSQL, which sees one text, prepares it once (server-side binding, settings);
given a `row` type (a NamedTuple), each row comes as one. Rows by primary key are written with
SQL built once per model and columns: `RowWrites` (one round trip on PostgreSQL for several), and
`insert` new objects; `lock_row` locks one.

Every write here keeps the model's `auto_now` fields true, as `Model.save()` would: read from the
model's fields (a field added later is kept too), set to the time of the write unless the caller
gives a value. (QuerySet.update() leaves them alone; these writes do not.)
"""
from __future__ import annotations

import datetime as dt
import inspect
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import DateTimeField, Field, Model, QuerySet
from django.db.models.sql import UpdateQuery
from django.utils import timezone

# Placeholder arguments: numbers and times no caller's query holds as a constant. The numbers
# lie within a 32-bit integer column's range, where the ORM keeps a comparison in the SQL
# (it folds one it knows to be always false away, `IntegerFieldOverflow`).
_PLACEHOLDER = 2_147_000_000
_PLACEHOLDER_TIME = dt.datetime(1901, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
# The time of an update's auto_now fields: a hidden argument, given the clock's time at each run.
_NOW = "(now)"
_PLACEHOLDER_NOW = dt.datetime(1901, 1, 1, 1, 1, 1, tzinfo=dt.UTC)


def auto_now_values(model: type[Model], now: dt.datetime) -> dict:
    """The model's auto_now fields, each at `now` (a date field at its date), as save() sets them."""
    return {field.attname: now if isinstance(field, DateTimeField) else timezone.localdate(now)
            for field in _auto_now_fields(model)}


@lru_cache(maxsize=64)
def _auto_now_fields(model: type[Model]) -> tuple:
    return tuple(field for field in model._meta.concrete_fields if getattr(field, "auto_now", False))


def updating(queryset: QuerySet, **values) -> UpdateQuery:
    """The UPDATE that `queryset.update(**values)` would run, for a `Compiled` statement, with
    the model's auto_now fields set to the time of each run (unless given)."""
    model: type[Model] = queryset.model
    for field in _auto_now_fields(model):
        if not isinstance(field, DateTimeField):
            raise NotImplementedError(f"{model.__name__}.{field.name}: an auto_now date in a compiled update")
        values.setdefault(field.attname, _PLACEHOLDER_NOW)
    query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))  # chain(klass) makes the copy a klass
    query.add_update_values(values)
    query.annotations = {}
    return query


@dataclass
class _Plan:
    sql: str
    params: list  # each an argument's name (str) or a constant of the query
    compiler: object
    converters: dict
    sets_auto_now: bool


class Compiled:
    """A statement built by the ORM once per connection: `rows(**arguments)` for a query,
    `execute(**arguments)` (the rows changed) for an update, or `rows(...)` for an update
    with `returning` fields (plain column values of the rows it changed, PostgreSQL and
    SQLite's RETURNING). The arguments are integers, but for those named in `datetimes`.
    With `row`, a NamedTuple of the statement's columns, each row is one."""

    def __init__(self, build: Callable[..., QuerySet | UpdateQuery], datetimes: tuple[str, ...] = (),
                 returning: tuple[str, ...] = (), row: type[tuple] = tuple):
        self.build = build
        self.names = list(inspect.signature(build).parameters)
        self.datetimes = frozenset(datetimes)
        self.returning = returning
        self.row: Any = row  # a NamedTuple class, or tuple
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def rows(self, **arguments) -> list:
        plan, cursor_rows = self._run(arguments, fetch=True)
        if plan.converters:
            cursor_rows = plan.compiler.apply_converters(cursor_rows, plan.converters)
        make = tuple.__new__
        return [make(self.row, row) for row in cursor_rows]

    def execute(self, **arguments) -> int:
        return self._run(arguments, fetch=False)[1]

    def _run(self, arguments: dict, *, fetch: bool):
        if arguments.keys() != set(self.names):
            raise TypeError(f"{self.build.__qualname__} takes {', '.join(self.names)}, not {', '.join(arguments)}")
        connection = connections[DEFAULT_DB_ALIAS]
        plan = self._plans.get(connection) or self._compile(connection)
        adapt = connection.ops.adapt_datetimefield_value
        given = {name: adapt(value) if name in self.datetimes else value for name, value in arguments.items()}
        if plan.sets_auto_now:
            given[_NOW] = adapt(timezone.now())
        params = [given[p] if isinstance(p, _Name) else p for p in plan.params]
        with connection.cursor() as cursor:
            cursor.execute(plan.sql, params)
            return plan, (cursor.fetchall() if fetch else cursor.rowcount)

    def _compile(self, connection) -> _Plan:
        placeholders = {
            name: _PLACEHOLDER_TIME + dt.timedelta(seconds=i) if name in self.datetimes else _PLACEHOLDER + i
            for i, name in enumerate(self.names)
        }
        built = self.build(**placeholders)
        query = built.query if isinstance(built, QuerySet) else built
        compiler = query.get_compiler(connection=connection)
        try:
            sql, params = compiler.as_sql()
        except EmptyResultSet:  # The ORM judged the whole query empty for the placeholders.
            raise ValueError(f"{self.build.__qualname__}: arguments {self.names} are not parameters of its SQL") \
                from None
        adapt = connection.ops.adapt_datetimefield_value
        by_value = {(adapt(value) if name in self.datetimes else value): _Name(name)
                    for name, value in placeholders.items()}
        by_value[adapt(_PLACEHOLDER_NOW)] = _Name(_NOW)
        mapped = [by_value.get(p, p) if isinstance(p, int | str | dt.datetime) else p for p in params]
        missing = set(self.names) - {p for p in mapped if isinstance(p, _Name)}
        if missing:
            raise ValueError(f"{self.build.__qualname__}: arguments {sorted(missing)} are not parameters of its SQL")
        converters = {}
        if not isinstance(built, UpdateQuery):
            converters = compiler.get_converters([s[0] for s in compiler.select[: compiler.col_count]])
            if self.row is not tuple and len(self.row._fields) != compiler.col_count:
                raise ValueError(f"{self.build.__qualname__}: {compiler.col_count} columns for {self.row.__name__}")
        elif self.returning:
            model = query.model
            assert model is not None  # An update's query has its model (updating: the queryset's).
            quote, table = connection.ops.quote_name, model._meta.db_table
            columns = (_column(_field(model, name)) for name in self.returning)
            sql += " RETURNING " + ", ".join(f"{quote(table)}.{quote(column)}" for column in columns)
        plan = _Plan(sql, mapped, compiler, converters, _NOW in mapped)
        with self._lock:
            self._plans[connection] = plan
        return plan


class _Name(str):
    """An argument's place among a compiled statement's parameters."""


def _prepared(model: type[Model], values: dict, connection) -> list:
    return [_field(model, name).get_db_prep_save(value, connection) for name, value in values.items()]


def _field(model: type[Model], name: str) -> Field:
    """The model's field `name`, one of its table's columns (not a relation's reverse side)."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field):
        raise TypeError(f"{model.__name__}.{name} is a relation's reverse side, not a column")
    return field


def _column(field: Field | None) -> str:
    """A field's column (every field `_field` gives, and every primary key, has one)."""
    if field is None or field.column is None:
        raise TypeError(f"{field!r} has no column")
    return field.column


class RowWrites:
    """UPDATEs of rows by primary key, gathered, then written together: on PostgreSQL as one
    statement (all but the last in a data-modifying WITH), elsewhere one statement each. A
    rating writes three rows of three tables (the rating, the step's time, the task's time):
    one round trip instead of three. Values for one row are merged into one UPDATE (PostgreSQL
    leaves two updates of a row in one statement unpredictable); each row's auto_now fields are
    set to the time of the write, so `update(model, pk)` alone marks a row changed. As a context
    manager it writes what it gathered when its block ends without an error.

    `write(if_version=...)` writes only while one of the rows is still as it was read, without a
    transaction or a lock: optimistic concurrency, on PostgreSQL, whose every update of a row gives
    it a new `xmin` (read as text, e.g. `RawSQL('"table"."xmin"::text')`)."""

    def __init__(self):
        self._rows: dict[tuple[type[Model], int], dict] = {}

    def __enter__(self) -> RowWrites:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.write()

    def __bool__(self) -> bool:
        """Whether anything is gathered and not written yet."""
        return bool(self._rows)

    def update(self, model: type[Model], pk: int, **values) -> None:
        self._rows.setdefault((model, pk), {}).update(values)

    def write(self, *, if_version: tuple[type[Model], int, str] | None = None) -> bool:
        """Write what is gathered; whether it was written. With `if_version` (model, pk, the xmin
        read), all of it in one statement that applies only if that row, which must be among the
        gathered, still has that xmin: none of it when another change of the row came in between."""
        gathered, self._rows = self._rows, {}
        now = timezone.now()
        rows = {key: values for key, given in gathered.items() if (values := {**auto_now_values(key[0], now), **given})}
        connection = connections[DEFAULT_DB_ALIAS]
        if if_version is not None:
            return _write_if_version(rows, if_version, connection)
        if connection.vendor != "postgresql" or len(rows) < 2:
            with connection.cursor() as cursor:
                for (model, pk), values in rows.items():
                    cursor.execute(_update_sql(model, tuple(values)), [*_prepared(model, values, connection), pk])
            return True
        shape = tuple((model, tuple(values)) for (model, _), values in rows.items())
        params = [p for (model, pk), values in rows.items() for p in (*_prepared(model, values, connection), pk)]
        with connection.cursor() as cursor:
            cursor.execute(_updates_sql(shape), params)
        return True


def _write_if_version(rows: dict[tuple[type[Model], int], dict], version: tuple[type[Model], int, str],
                      connection) -> bool:
    if connection.vendor != "postgresql":
        raise NotImplementedError("a row's version (xmin) is PostgreSQL's: write under a lock elsewhere")
    model, pk, xmin = version
    ordered = [((model, pk), rows.pop((model, pk))), *rows.items()]  # The versioned row first (KeyError: not gathered).
    shape = tuple((m, tuple(values)) for (m, _), values in ordered)
    params = [p for (m, key), values in ordered for p in (*_prepared(m, values, connection), key)]
    params.insert(len(ordered[0][1]) + 1, xmin)  # right after the versioned row's key
    with connection.cursor() as cursor:
        cursor.execute(_versioned_updates_sql(shape), params)
        return cursor.fetchone()[0] == 1


def lock_row(model: type[Model], pk: int) -> None:
    """SELECT ... FOR UPDATE of one row by primary key, written out: the ORM would build (and
    read) the whole row for a lock. Nothing to do where rows are not locked (SQLite's IMMEDIATE
    transactions serialize every writer)."""
    connection = connections[DEFAULT_DB_ALIAS]
    if not connection.features.has_select_for_update:
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {quote(model._meta.db_table)} WHERE {quote(_column(model._meta.pk))} = %s "
                       "FOR UPDATE", [pk])


@lru_cache(maxsize=256)
def _update_sql(model: type[Model], names: tuple[str, ...]) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    columns = ", ".join(f"{quote(_column(_field(model, name)))} = %s" for name in names)
    return f"UPDATE {quote(model._meta.db_table)} SET {columns} WHERE {quote(_column(model._meta.pk))} = %s"


# Rows per INSERT at most: SQLite allows 32,766 parameters a statement.
_INSERT_BATCH = 1000


def insert(objs: Sequence[Model]) -> None:
    """INSERT new objects of one model and set their primary keys: what `bulk_create` does (each
    field's default and pre_save, as auto_now_add; no signals), with the SQL built once per
    model and row count instead of by the ORM on every call (a claim inserts its annotation and
    one row per step twice: 1.4 of the 2 ms a claim spent in Python)."""
    if not objs:
        return
    connection = connections[DEFAULT_DB_ALIAS]
    model = type(objs[0])
    for start in range(0, len(objs), _INSERT_BATCH):
        batch = objs[start : start + _INSERT_BATCH]
        params = [value for obj in batch for value in insert_values(obj, connection)]
        with connection.cursor() as cursor:
            cursor.execute(_insert_sql(model, len(batch), connection.vendor), params)
            # Keys are drawn in the order the rows are inserted; RETURNING's order is not promised.
            keys = sorted(row[0] for row in cursor.fetchall())
        for obj, pk in zip(batch, keys, strict=True):
            inserted(obj, pk)


@lru_cache(maxsize=64)
def insert_fields(model: type[Model]) -> list[Field]:
    """The columns an INSERT of the model writes: all but its automatic primary key."""
    return [field for field in model._meta.local_concrete_fields if field is not model._meta.pk]


def insert_values(obj: Model, connection) -> list:
    """A new object's value for each of `insert_fields`, in database form: its default or what
    pre_save gives (auto_now_add), as save() would write it."""
    return [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in insert_fields(type(obj))]


def inserted(obj: Model, pk: int) -> None:
    """Mark an object as saved under the key its INSERT was given."""
    obj.pk = pk
    obj._state.adding, obj._state.db = False, DEFAULT_DB_ALIAS


@lru_cache(maxsize=256)
def _insert_sql(model: type[Model], count: int, vendor: str) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    fields = insert_fields(model)
    row = f"({', '.join(['%s'] * len(fields))})"
    return (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(_column(f)) for f in fields)}) "
            f"VALUES {', '.join([row] * count)} RETURNING {quote(_column(model._meta.pk))}")


@lru_cache(maxsize=64)
def _updates_sql(shape: tuple[tuple[type[Model], tuple[str, ...]], ...]) -> str:
    *first, last = (_update_sql(model, names) for model, names in shape)
    return "WITH " + ", ".join(f"w{i} AS ({sql})" for i, sql in enumerate(first)) + " " + last


@lru_cache(maxsize=64)
def _versioned_updates_sql(shape: tuple[tuple[type[Model], tuple[str, ...]], ...]) -> str:
    """The first row's UPDATE if its xmin is as given; the others' only if that one was made.
    Under a concurrent change of that row, PostgreSQL waits for it to commit, then checks the
    condition against the row as changed (READ COMMITTED), so its new xmin fails it."""
    (model, names), *others = shape
    updates = [f"v AS ({_update_sql(model, names)} AND xmin = %s::xid RETURNING 1)"]
    updates += [f"w{i} AS ({_update_sql(m, n)} AND EXISTS (SELECT 1 FROM v))" for i, (m, n) in enumerate(others)]
    return "WITH " + ", ".join(updates) + " SELECT count(*) FROM v"


def refresh_statistics(*models: type[Model]) -> None:
    """ANALYZE the models' tables on PostgreSQL, so the planner knows what a bulk write made of
    them (PostgreSQL's own advice after loading data): until autovacuum next looks, or for good
    where it is off, its plans assume the tables as they were. Nothing elsewhere."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.vendor != "postgresql":
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {', '.join(quote(model._meta.db_table) for model in models)}")
