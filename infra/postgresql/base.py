"""Django's PostgreSQL backend with a health check that makes no round trip.

Health checks (CONN_HEALTH_CHECKS) replace a persistent connection that the server dropped
(a restart, pg_terminate_backend) before a request uses it, instead of failing the request.
Django checks with a `SELECT 1` at the start of every request: a round trip to the server,
one statement in six of a rating, for a question the socket already answers. A server that
ends a connection says so on it (an error message, then the end of the stream), so an idle
connection with anything to read, or one libpq knows is broken, is dropped; an idle
connection has nothing to read otherwise (Stepwise never LISTENs). `is_usable()`, which code
calls after an error, still asks the server.

Behind a pooler in transaction mode (PgBouncer) each transaction may run on another server
connection, so nothing may outlive a transaction on one: a prepared statement (psycopg names
them per connection: "prepared statement _pg3_0 does not exist", or "already exists") or a
WITH HOLD cursor (what `QuerySet.iterator()` opens outside a transaction). A new connection
finds out whether a pooler stands in between (`through_pooler`); behind one it prepares
nothing unless DB_PREPARED_STATEMENTS=true says the pooler keeps them (PgBouncer 1.21+ with
max_prepared_statements), and iterates outside transactions with a client-side cursor.
"""
import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    behind_pooler = False

    def get_connection_params(self):
        params = super().get_connection_params()
        params.pop("prepare_behind_pooler", None)  # ours (settings.py), not psycopg's
        return params

    def init_connection_state(self):
        super().init_connection_state()
        self.behind_pooler = through_pooler(self.connection)
        if self.behind_pooler and not self.settings_dict["OPTIONS"].get("prepare_behind_pooler"):
            self.connection.prepare_threshold = None

    def chunked_cursor(self):
        # Inside a transaction a named cursor stays on one server connection; outside one,
        # Django would open it WITH HOLD, and the pooler would send its FETCH elsewhere.
        if self.get_autocommit() and self.behind_pooler:
            return self._cursor()
        return super().chunked_cursor()

    def close_if_health_check_failed(self):
        if self.pool or self.connection is None or not self.health_check_enabled or self.health_check_done:
            return
        if dropped(self.connection.pgconn):
            self.close()
        self.health_check_done = True


def dropped(pgconn: pq.abc.PGconn) -> bool:
    """Whether the server ended this idle connection (or libpq already knows it is broken)."""
    if pgconn.status != pq.ConnStatus.OK:
        return True
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def through_pooler(connection) -> bool:
    """Whether a pooler stands between this connection and PostgreSQL: the backend that runs its
    statements is not the one that greeted it (PgBouncer greets clients with a key of its own)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0] != connection.info.backend_pid
