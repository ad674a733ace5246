"""POST /label/<id>/heartbeat: bounded step_ms, one statement, a per-user rate limit, and a
flood of oversized heartbeats that neither writes anything nor slows the site."""
import threading
import time

import pytest
import requests
from django.core.cache import caches
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate.labeling import queueing
from annotate.models import StepLabel
from bench import loadtest
from tests.conftest import _test_database_url
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.embedded]
HUGE_STEP_MS = ",".join(f"{i}:{i}" for i in range(10_000))  # ~69 KB, as in the attack


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    # The counts live in the cache every web process shares (infra/throttling.py), which
    # outlives a test's database, whose user ids SQLite reuses.
    caches["throttle"].clear()
    yield
    caches["throttle"].clear()


@pytest.fixture
def task(annotator):
    SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4.", "# Answer\n\n4"])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def beat(annotator, task, **data):
    client = Client()
    client.force_login(annotator)
    return client.post(reverse("annotate:label-heartbeat", args=[task.pk]), data)


def step_times(task) -> list:
    return list(StepLabel.objects.filter(annotation=task).order_by("index").values_list("time_ms", flat=True))


@pytest.mark.django_db
def test_step_times_are_written_with_the_total_in_one_statement_on_postgresql(annotator, task):
    with CaptureQueriesContext(connection) as queries:
        assert beat(annotator, task, total_ms=3000, step_ms="0:1000,1:1500,2:500").status_code == 204
    writes = [q["sql"] for q in queries.captured_queries
              if q["sql"].startswith(("UPDATE", "WITH")) and '"annotate_steplabel"' in q["sql"]]
    assert len(writes) == (1 if connection.vendor == "postgresql" else 3)  # elsewhere one per row
    assert step_times(task) == [1000, 1500, 500]


@pytest.mark.django_db
def test_a_step_time_never_goes_down(annotator, task):
    beat(annotator, task, total_ms=3000, step_ms="0:1000")
    beat(annotator, task, total_ms=3000, step_ms="0:400,1:200")
    assert step_times(task)[:2] == [1000, 200]


@pytest.mark.django_db
def test_more_pairs_than_the_solution_has_steps_are_refused_and_nothing_is_written(annotator, task):
    response = beat(annotator, task, total_ms=3000, step_ms="0:1000,1:1000,2:1000,3:1000")
    assert response.status_code == 400
    assert "step of this solution" in response.content.decode()
    task.refresh_from_db()
    assert (task.total_time_ms, step_times(task)) == (None, [None, None, None])


@pytest.mark.django_db
def test_ten_thousand_pairs_are_refused_before_the_database_is_asked(annotator, task):
    with CaptureQueriesContext(connection) as queries:
        response = beat(annotator, task, total_ms=3000, step_ms=HUGE_STEP_MS)
    assert response.status_code == 400
    assert "at most 500" in response.content.decode()
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE \"annotate_")]
    assert step_times(task) == [None, None, None]


@pytest.mark.django_db
@override_settings(STEPWISE_HEARTBEATS_PER_MINUTE=3)
def test_heartbeats_past_the_per_minute_limit_get_429_for_that_user_only(annotator, task):
    assert [beat(annotator, task, total_ms=1000 + i).status_code for i in range(4)] == [204, 204, 204, 429]
    other = user_with_role("other", "annotator")
    assert beat(other, task).status_code == 404  # Not limited: counted per user (and not theirs).


@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_oversized_heartbeats_are_refused_fast_and_login_still_answers_within_1s():
    password = "heartbeat-flood-1"
    attacker = user_with_role("flooder", "annotator")
    attacker.set_password(password)
    attacker.save()
    SolutionFactory(steps=["a", "b", "c", "d"])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=attacker)
    server = loadtest.Server(database_url=_test_database_url())
    try:
        server.wait_until_up()
        session = loadtest.Annotator(server.url, "flooder", password, deadline=float("inf"), max_requests=100)
        session.log_in()
        cookies, token = session.http.cookies, session.http.cookies.get("csrftoken")
        statuses, start = [], threading.Barrier(17)

        def flood():
            start.wait()
            response = requests.post(f"{server.url}/label/{task.pk}/heartbeat", timeout=60, cookies=cookies,
                                     data={"total_ms": 1000, "step_ms": HUGE_STEP_MS},
                                     headers={"X-CSRFToken": token, "Referer": server.url + "/"})
            statuses.append(response.status_code)

        threads = [threading.Thread(target=flood) for _ in range(16)]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        login = requests.get(f"{server.url}/accounts/login/", timeout=30)
        login_seconds = time.perf_counter() - began
        for thread in threads:
            thread.join()
        flood_seconds = time.perf_counter() - began
    finally:
        server.stop()
    assert statuses == [400] * 16
    assert login.status_code == 200 and login_seconds < 1.0, f"login page took {login_seconds:.2f} s"
    assert flood_seconds < 10, f"16 refusals took {flood_seconds:.1f} s"
    assert step_times(task) == [None] * 4
