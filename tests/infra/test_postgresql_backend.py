"""A persistent connection's health is checked at each request without a query (infra/postgresql)."""
import time

import psycopg
import pytest
from django.db import connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]


def other_connection() -> psycopg.Connection:
    params = connection.get_connection_params()
    return psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "password", "host", "port")},
                           autocommit=True)


def our_backend() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def a_new_request_begins() -> None:
    # What Django does when a request starts: each connection is checked once, at its first use.
    connection.health_check_done = False
    connection.close_if_health_check_failed()


def test_a_connection_the_server_ended_is_replaced_before_a_request_uses_it():
    assert connection.health_check_enabled is not False
    pid = our_backend()
    with other_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 5
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, "the backend was not terminated"
            time.sleep(0.05)
    a_new_request_begins()
    assert connection.connection is None  # closed, so the request's first query reconnects
    assert our_backend() != pid


def test_a_live_connection_is_kept_and_the_server_is_asked_nothing():
    pid = our_backend()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'the last statement before the check'")
    a_new_request_begins()
    assert connection.connection is not None
    with other_connection() as other:
        (last,) = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert last == "SELECT 'the last statement before the check'"  # no SELECT 1 after it
    assert our_backend() == pid
