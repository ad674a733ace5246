"""Redis is optional at run time: with it stopped for 30 s, annotators keep labeling over HTTP
against a real web process (sessions from PostgreSQL, rates counted by nobody), a login works,
a job started meanwhile waits in its row, and once Redis is back (empty, as a restart leaves it)
the jobs finish with no step by hand.

The Redis that stops is this test's own (tests/test_faults.py's PrivateRedis on a free port);
the web process (bench/loadtest.py's Server: the script's web_server) and the worker use it
for everything: broker, sessions, memo stamps, rate counts. Below, in one process: a logout made
while Redis is away is not undone by Redis' old copy of the session, and /api/score answers 503.
"""
from __future__ import annotations

import threading
import time

import pytest
import requests
from django.core.cache import caches
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.labeling import queueing
from annotate.models import ExportJob, LabelingConfig, Project
from bench.commands.bench_http import _check as duplicates_and_lost
from bench.loadtest import NEXT, RATE, Annotator, ClientResult, Server
from scoring.models import RescoreJob, SolutionScore
from scoring.rescoring import rescore as scoring
from tests.conftest import _test_database_url
from tests.factories import user_with_role
from tests.jobs.test_recovery import finished, tiny_current, worker_factory  # noqa: F401 (fixtures)
from tests.scoring.test_tasks import make_pool
from tests.test_faults import beat_reconciles_until, private_redis  # noqa: F401 (a fixture)

PASSWORD = "pass-for-tests"
DOWN_SECONDS = 30
# Annotators pause between tasks as people do: unpaced, three of them labeled all of a 400-solution
# pool within the first seconds on a quiet machine, and a claim made during the outage found nothing.
THINK_SECONDS = 0.25
POOL = 1000


class Labeling:
    """Annotators labeling in threads until told to stop: what each saw."""

    def __init__(self, base: str, usernames: list[str]):
        self.stop = threading.Event()
        self.annotators = [Annotator(base, name, PASSWORD, deadline=float("inf"), max_requests=100_000)
                           for name in usernames]
        for annotator in self.annotators:
            annotator.log_in()
        self.threads = [threading.Thread(target=self._label, args=(a,), daemon=True) for a in self.annotators]
        for thread in self.threads:
            thread.start()

    def _label(self, annotator: Annotator) -> None:
        page = None
        while not self.stop.is_set():
            try:
                page = annotator.label_one(page)
            except Exception:  # noqa: BLE001 - a request with no answer is counted in statuses[0]
                page = None
            self.stop.wait(THINK_SECONDS)
            if page is False:
                return

    def answered(self) -> int:
        """Ratings and next tasks asked for so far."""
        return sum(len(a.result.timings.get(name, [])) for a in self.annotators for name in (RATE, NEXT))

    def finish(self) -> list[ClientResult]:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        return [annotator.result for annotator in self.annotators]


@pytest.fixture
def web_on_private_redis(transactional_db, private_redis, tmp_path):  # noqa: F811
    server = Server(database_url=_test_database_url(), extra_env={"REDIS_URL": private_redis.url},
                    log=tmp_path / "web.log")
    try:
        server.wait_until_up(90)
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.postgresql
def test_labeling_answers_every_request_while_redis_is_stopped_and_jobs_finish_once_it_is_back(
    tiny_current, worker_factory, private_redis, web_on_private_redis, tmp_path  # noqa: F811
):
    LabelingConfig.objects.update_or_create(pk=LabelingConfig.of(Project.objects.sole()).pk,
                                            defaults={"qc_rate": 0, "screening_required": False})
    make_pool(POOL, steps=3)
    queueing.ensure_default_queue()
    usernames = [user_with_role(f"steady{i}", "annotator").username for i in range(3)]
    user_with_role("late", "annotator")
    admin = user_with_role("boss", "admin", is_staff=True, is_superuser=True)
    token = Token.objects.create(user=admin).key
    rescore = scoring.start_rescore(model_version=tiny_current, rebuild_queue=False)
    # Sent to the test's broker; the worker's start sends it again to the private one.
    worker_factory(REDIS_URL=private_redis.url, STEPWISE_JOB_REQUEUE_SECONDS="2")
    base = web_on_private_redis.url

    labeling = Labeling(base, usernames)
    time.sleep(5)
    private_redis.kill()
    assert not finished(RescoreJob, rescore.pk), "the rescore ended before Redis stopped"
    stopped, before = time.monotonic(), labeling.answered()
    time.sleep(3)
    # A login, and a job started over the API, while Redis is away.
    late = Annotator(base, "late", PASSWORD, deadline=float("inf"), max_requests=100)
    late.log_in()
    assert late._claim() is not None, f"no task claimed while Redis was away: {dict(late.result.statuses)}"
    export = requests.post(f"{base}/api/exports", json={"format": "prm800k"}, timeout=30,
                           headers={"Authorization": f"Token {token}"})
    assert export.status_code == 201, export.text
    time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - stopped)))
    during = labeling.answered() - before
    private_redis.start()
    time.sleep(5)
    results = [*labeling.finish(), late.result]

    statuses = sum((r.statuses for r in results), start=type(results[0].statuses)())
    assert statuses[0] == 0 and not any(code >= 500 for code in statuses), (statuses, [r.no_answers for r in results])
    timings = {name: sorted(t for r in results for t in r.timings.get(name, [])) for name in (RATE, NEXT)}
    print(f"{during} ratings and next tasks while Redis was stopped for {DOWN_SECONDS} s; statuses {dict(statuses)};",
          ", ".join(f"{name} p95 {values[int(0.95 * (len(values) - 1))]:.0f} ms" for name, values in timings.items()))
    assert during > 50, f"{during} ratings and next tasks in {DOWN_SECONDS} s: too few to show anything"
    assert duplicates_and_lost(results, [*usernames, "late"]) == (0, 0)
    # Once Redis is back, beat's reconciler sends what the outage dropped: each job finishes, once.
    beat_reconciles_until(private_redis.url, lambda: finished(RescoreJob, rescore.pk) and
                          finished(ExportJob, export.json()["id"]), timeout=240)
    rescore.refresh_from_db()
    assert rescore.state == "succeeded" and SolutionScore.objects.filter(model_version=tiny_current).count() == POOL
    assert ExportJob.objects.get(pk=export.json()["id"]).state == "succeeded"


@pytest.mark.django_db
def test_scoring_over_the_api_answers_503_not_500_while_redis_is_away(redis_stopped):
    client = APIClient()
    client.force_authenticate(user_with_role("boss", "admin", is_staff=True, is_superuser=True))
    answer = client.post("/api/score", {"problem": "What is 2 + 3?", "steps": ["2 + 3 = 5."]}, format="json")
    assert answer.status_code == 503 and "Redis cannot be reached" in answer.json()["detail"]


class Silent:
    """A cache as django-redis' IGNORE_EXCEPTIONS leaves it while Redis is away: every read a miss,
    every write nothing, each answering None."""

    def __contains__(self, key) -> bool:
        return False

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@pytest.mark.django_db
def test_a_logout_while_redis_is_away_stays_a_logout_once_it_is_back(client, monkeypatch, settings):
    if settings.SESSION_ENGINE != "infra.sessions":
        pytest.skip("sessions are cached in Redis only with REDIS_URL")
    client.force_login(user_with_role("kim", "annotator"))
    assert client.get(reverse("annotate:label-start")).status_code == 200  # the session is cached in Redis now
    stolen = client.cookies[settings.SESSION_COOKIE_NAME].value
    with monkeypatch.context() as away:
        away.setattr(caches._connections, "sessions", Silent(), raising=False)
        assert client.post(reverse("logout")).status_code == 302  # from the database only
        thief = Client()
        thief.cookies[settings.SESSION_COOKIE_NAME] = stolen
        assert thief.get(reverse("annotate:label-start")).status_code == 302  # to the login page: from the database
    # Redis is back with its copy of the session; the logout still holds.
    thief = Client()
    thief.cookies[settings.SESSION_COOKIE_NAME] = stolen
    assert thief.get(reverse("annotate:label-start")).status_code == 302
    client.force_login(user_with_role("lee", "annotator"))
    assert client.get(reverse("annotate:label-start")).status_code == 200
