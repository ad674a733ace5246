"""Django's PostgreSQL backend with a health check that makes no round trip.

Health checks (CONN_HEALTH_CHECKS) replace a persistent connection that the server dropped
(a restart, pg_terminate_backend) before a request uses it, instead of failing the request.
Django checks with a `SELECT 1` at the start of every request: a round trip to the server,
one statement in six of a rating, for a question the socket already answers. A server that
ends a connection says so on it (an error message, then the end of the stream), so an idle
connection with anything to read, or one libpq knows is broken, is dropped; an idle
connection has nothing to read otherwise (Stepwise never LISTENs). `is_usable()`, which code
calls after an error, still asks the server.
"""
import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
