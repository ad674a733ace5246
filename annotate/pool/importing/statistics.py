"""The planner's statistics of the pool tables, renewed while an import grows them.

PostgreSQL plans each lookup from statistics that autovacuum renews only after the fact: not
within an import's transaction (an atomic import is one), not while autovacuum is off, and at
best a minute late otherwise. An import into a pool the statistics call empty had each batch's
lookup of its content hashes (1,000 of them, in a project) planned as a scan of the whole table,
half a second a batch at 50,000 solutions: 50,000 lines imported in 118 s, against 10 s since
(`./stepwise bench bench_import`, 2026-12-07, 2-core VM). So the import analyzes the tables it
writes each time the lines it imported double, from 2,000 on: a handful of ANALYZEs an import,
each a sample of the table (tens of milliseconds).
"""
from __future__ import annotations

import logging

from django.db import DatabaseError, connection, transaction

from annotate.models import Problem, SampleLine, Solution, Step

FIRST = 2_000  # lines imported before the first renewal
TABLES = (Problem, Solution, Step, SampleLine)
log = logging.getLogger(__name__)


class PlannerStatistics:
    """Counts the lines an import has written and renews the tables' statistics as they double."""

    def __init__(self) -> None:
        self.written = 0
        self.next_renewal = FIRST

    def wrote(self, lines: int) -> None:
        self.written += lines
        if self.written >= self.next_renewal:
            self.next_renewal = 2 * self.written
            renew()


def renew() -> None:
    """ANALYZE the pool tables (PostgreSQL; SQLite plans without them). Inside the import's
    transaction it counts the rows the transaction wrote; where the database user may not
    analyze them, the import goes on as before, under a savepoint so its transaction stays whole."""
    if connection.vendor != "postgresql":
        return
    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in TABLES)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {tables}")
    except DatabaseError as error:
        log.warning("could not renew the pool tables' statistics: %s", error)
