"""Every /api/score request is bounded: tokens per request, requests in flight per user, one deadline.

The load tests run what `./stepwise run` runs: waitress (2 processes x 4 Django threads) on the test
database and a real worker on the `score` queue, with the tiny test PRM, which a maximal request
keeps busy for seconds on a 2-core machine, while annotators log in and open their next task.
"""
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from rest_framework.authtoken.models import Token

from annotate.labeling import queueing
from bench.loadtest import Connection, Server
from bench.tiny import build_tiny_prm
from scoring.models import ModelVersion
from scoring.store import registry
from scoring.tasks import score_texts_task
from scoring.web.api.serializers import MAX_ITEMS, ScoreRequestSerializer, token_count
from steps.limits import MAX_STEPS
from tests.conftest import WorkerProcess, _test_database_url, wait_for
from tests.factories import user_with_role
from tests.infra import attacks
from tests.infra.attacks import Target
from tests.load import page_bound_under_load
from tests.scoring.test_tasks import make_pool

PROBLEM = "What is 1 + 1?"
ROUNDS = 5
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def maximal_items(max_tokens: int) -> list[dict]:
    """MAX_ITEMS solutions of MAX_STEPS steps each, as long as the token bound lets them be."""
    room = max_tokens // MAX_ITEMS - len(PROBLEM.encode())
    step = ("1 + 1 = 2. " * 20)[: room // MAX_STEPS - 1]  # one token more per step: its separator
    items = [{"problem": PROBLEM, "steps": [step] * MAX_STEPS} for _ in range(MAX_ITEMS)]
    assert max_tokens - MAX_ITEMS * MAX_STEPS < sum(map(token_count, items)) <= max_tokens
    return items


# --- the token bound (no worker: refused before anything is sent) ----------------------------------


@pytest.mark.parametrize(("body", "field"), [
    ({"items": [{"problem": PROBLEM, "steps": ["a" * 60]}] * 2}, "items"),
    ({"problem": PROBLEM, "steps": ["∑" * 40]}, "steps"),  # 40 characters, 120 bytes: counted as 120
    ({"problem": PROBLEM, "completion": "Step one.\n\n" + "x" * 150}, "completion"),
])
def test_a_request_past_the_token_bound_gets_400_naming_its_field(reviewer, settings, body, field):
    settings.STEPWISE_SCORE_MAX_TOKENS = 100
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(reviewer)
    response = api.post("/api/score", body, format="json")
    assert response.status_code == 400, response.content
    assert "STEPWISE_SCORE_MAX_TOKENS" in response.json()[field][0]


def test_a_request_exactly_at_the_token_bound_is_accepted(settings):
    settings.STEPWISE_SCORE_MAX_TOKENS = 32_768
    items = maximal_items(32_768)
    assert ScoreRequestSerializer(data={"items": items}).is_valid()
    items[0]["steps"][0] += "x" * (32_768 - sum(map(token_count, items)))
    assert sum(map(token_count, items)) == 32_768 and ScoreRequestSerializer(data={"items": items}).is_valid()
    items[0]["steps"][0] += "x"
    assert not ScoreRequestSerializer(data={"items": items}).is_valid()


# --- the running app ---------------------------------------------------------------------------------


@pytest.fixture
def scoring_app(transactional_db, tmp_path, request):
    """The web server and a `score` worker on the test database; `request.param`: environment for both."""
    extra_env = {"STEPWISE_SCORING_DTYPE": "float32", **getattr(request, "param", {})}
    version = registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete("score")  # no message left by an earlier test
    with pytest.MonkeyPatch.context() as patch:
        for name, value in extra_env.items():
            patch.setenv(name, value)
        patch.setenv("OMP_NUM_THREADS", "1")
        worker = WorkerProcess(tmp_path / "worker.log", queues="score")  # as `./stepwise run` starts it
        worker.start()
    # The model loaded in the worker before anything is timed (seconds on a busy machine).
    assert "steps" in score_texts_task.delay(version.pk, [[PROBLEM, ["2"]]]).get(timeout=120)
    server = Server(database_url=_test_database_url(), workers=2, extra_env=extra_env)
    try:
        server.wait_until_up(90)
        yield server, worker
    finally:
        server.stop()
        worker.stop()


def tokens_of(*usernames: str) -> list[str]:
    return [Token.objects.create(user=user_with_role(name, "reviewer")).key for name in usernames]


def post_score(server: Server, token: str, body: dict, timeout: float = 120) -> tuple[int, dict, float]:
    started = time.monotonic()
    answer = Connection(server.url, timeout=timeout).request(
        "POST", "/api/score", headers={"Authorization": f"Token {token}"}, json_body=body)
    return answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, time.monotonic() - started


class AnnotatorPages:
    """Annotators logging in and opening their next task in a loop, each request timed."""

    def __init__(self, server: Server, usernames: list[str]):
        self.server, self.usernames = server, usernames
        self.timings: dict[str, list[float]] = {"login": [], "next task": []}
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(name,)) for name in usernames]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _timed(self, what: str, http: Connection, method: str, path: str, **kwargs):
        started = time.monotonic()
        answer = http.request(method, path, **kwargs)
        self.statuses.append(answer.status_code)
        self.timings[what].append(time.monotonic() - started)
        return answer

    def _loop(self, username: str) -> None:
        while not self._stop.is_set():
            http = Connection(self.server.url)  # a new browser: no cookies, a full login
            page = http.request("GET", "/accounts/login/")
            form = {"username": username, "password": "pass-for-tests",
                    "csrfmiddlewaretoken": CSRF_INPUT.search(page.text).group(1)}
            headers = {"Referer": self.server.url + "/"}
            self._timed("login", http, "POST", "/accounts/login/", form=form, headers=headers)
            headers["X-CSRFToken"] = http.cookies.get("csrftoken", "")
            self._timed("next task", http, "POST", "/label/next", form={}, headers=headers)
            http.close()

    def p95(self, what: str) -> float:
        timings = sorted(self.timings[what])
        return timings[min(len(timings) - 1, int(0.95 * len(timings)))]


def worker_outcomes(worker: WorkerProcess) -> dict[str, int]:
    """How the worker ended each score task, read from its log: answered, discarded unstarted,
    stopped at its deadline (the task's own line), or ended by its time limit outside its own
    handling (a soft limit's signal landing between two tasks: the API says 503 for it too)."""
    log = worker.log_path.read_text()
    return {
        "answered": len(re.findall(r"score_texts_task\[[^]]+\] succeeded", log)),
        "discarded": len(re.findall(r"Discarding revoked task: scoring.tasks.score_texts_task", log)),
        "abandoned": log.count("scoring for /api/score abandoned"),
        "failed": len(re.findall(r"score_texts_task\[[^]]+\] raised unexpected", log)),
    }


@pytest.mark.postgresql
def test_twenty_maximal_requests_at_once_do_not_hold_up_login_and_next_task(scoring_app):
    server, worker = scoring_app
    make_pool(40)
    queueing.ensure_default_queue()
    annotators = [user_with_role("pages", "annotator").username]
    token, = tokens_of("rl-trainer")
    body = {"items": maximal_items(settings.STEPWISE_SCORE_MAX_TOKENS)}

    with AnnotatorPages(server, annotators) as baseline:
        time.sleep(4)
    with AnnotatorPages(server, annotators) as pages, ThreadPoolExecutor(max_workers=20) as pool:
        # Five times twenty requests at once: the pages are timed under the load, not beside it.
        answers = [answer for _ in range(ROUNDS) for answer in pool.map(lambda _: post_score(server, token, body),
                                                                         range(20))]
    statuses = sorted(status for status, _, _ in answers)
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 1, statuses
    assert statuses.count(429) >= ROUNDS * (20 - 2 * 2), statuses  # 2 in flight for the user, 2 waits per process
    assert all(headers.get("retry-after") == "1" for status, headers, _ in answers if status == 429)
    assert set(pages.statuses) <= {200, 302}, pages.statuses
    assert len(pages.timings["login"]) >= 5, pages.timings
    print(f"login p95 {pages.p95('login'):.3f} s (alone {baseline.p95('login'):.3f}), next task p95 "
          f"{pages.p95('next task'):.3f} s (alone {baseline.p95('next task'):.3f}) over {len(pages.timings['login'])} "
          f"logins; {statuses.count(200)} answered, {statuses.count(429)} refused; "
          f"slowest score {max(seconds for _, _, seconds in answers):.2f} s")
    # Scoring shares the cores with the pages and never holds them (scored in a web process, a
    # login would wait seconds behind it).
    for page in ("login", "next task"):
        assert pages.p95(page) < page_bound_under_load(baseline.p95(page)), (page, pages.timings, baseline.timings)


@pytest.mark.postgresql
@pytest.mark.parametrize("scoring_app", [{"STEPWISE_SCORE_IN_FLIGHT": "2", "STEPWISE_SCORE_CONCURRENCY": "8",
                                          "STEPWISE_SCORE_API_TIMEOUT": "3"}], indirect=True)
def test_a_users_requests_in_flight_are_bounded_across_web_processes_and_released_on_every_exit(scoring_app):
    server, worker = scoring_app
    mine, other = tokens_of("client-a", "client-b")
    body = {"items": maximal_items(settings.STEPWISE_SCORE_MAX_TOKENS)}
    user_id = Token.objects.get(key=mine).user_id
    throttle = caches["throttle"]
    places = [f"score-in-flight:{user_id}:{n}" for n in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        held = [pool.submit(post_score, server, mine, body) for _ in range(2)]
        wait_for(lambda: all(throttle.get(key) for key in places), timeout=20, interval=0.02)
        status, headers, seconds = post_score(server, mine, body)
        assert (status, headers.get("retry-after")) == (429, "1") and seconds < 1.0
        assert post_score(server, other, {"problem": PROBLEM, "steps": ["2"]})[0] == 200  # another user is served
        first = [future.result() for future in held]
    # A maximal request takes the worker longer than the 3 s wait: some end in 503, and still
    # give their place back, as answered ones do.
    assert {status for status, _, _ in first} <= {200, 503}
    assert not any(throttle.get(key) for key in places)
    assert post_score(server, mine, {"problem": PROBLEM, "steps": ["2"]})[0] == 200


@pytest.mark.postgresql
@pytest.mark.parametrize("scoring_app", [{"STEPWISE_SCORE_IN_FLIGHT": "8", "STEPWISE_SCORE_CONCURRENCY": "4",
                                          "STEPWISE_SCORE_API_TIMEOUT": "0.5"}], indirect=True)
def test_requests_that_time_out_are_not_computed_on(scoring_app):
    server, worker = scoring_app
    token, = tokens_of("impatient")
    body = {"items": maximal_items(settings.STEPWISE_SCORE_MAX_TOKENS)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: post_score(server, token, body), range(8)))
    statuses = [status for status, _, _ in answers]
    timed_out = statuses.count(503)
    assert set(statuses) <= {200, 503} and timed_out >= 6, statuses  # a maximal request takes seconds
    # Had the worker computed them, it would be busy for 8 maximal requests; it is free within
    # about one chunk of one.
    freed = time.monotonic()
    version = ModelVersion.objects.get(name="tiny").pk
    assert "steps" in score_texts_task.delay(version, [[PROBLEM, ["2"]]]).get(timeout=60)  # behind what is left
    busy_after = time.monotonic() - freed
    answered = 2 + statuses.count(200)  # the warm-up, the single request and those in time
    # The worker logs a task's end just after storing its result: wait for the lines, then count.
    outcomes = wait_for(lambda: (o := worker_outcomes(worker))["discarded"] + o["abandoned"] + o["failed"]
                        >= timed_out
                        and o["answered"] >= answered and o, timeout=30)
    print(f"{timed_out} of 8 timed out; the worker was busy {busy_after:.2f} s more; outcomes {outcomes}")
    # Nothing answered for one that timed out.
    assert outcomes["answered"] == answered, outcomes
    assert busy_after < 3.0


@pytest.mark.slow
@pytest.mark.postgresql
def test_a_chunked_request_is_scored_like_one_with_a_length_while_annotators_label(scoring_app):
    """A client that sends its body chunked (no Content-Length, as streaming HTTP clients do) gets
    its scores: the server reads the chunks whole and hands Django the body with its length."""
    server, _ = scoring_app
    make_pool(20)
    queueing.ensure_default_queue()
    token, = tokens_of("streaming-client")
    target = Target(port=server.port, pids=server.pids, temp_dirs=[], idle_timeout=30)
    body = json.dumps({"problem": PROBLEM, "steps": ["1 + 1 = 2.", "# Answer\n\n2"]}).encode()
    annotators = [user_with_role("beside", "annotator").username]
    with AnnotatorPages(server, annotators) as baseline:
        time.sleep(3)
    with AnnotatorPages(server, annotators) as pages:
        answers = [attacks.chunked(target, "/api/score", body, {"Authorization": f"Token {token}",
                                                               "Content-Type": "application/json"})
                   for _ in range(5)]
    for status, answer in answers:
        assert status == 200, answer[-300:]
        scores = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert len(scores["steps"]) == 2, scores
    assert set(pages.statuses) <= {200, 302} and pages.timings["login"], pages.statuses
    assert pages.p95("login") < page_bound_under_load(baseline.p95("login")), (pages.timings, baseline.timings)
    assert pages.p95("next task") < page_bound_under_load(baseline.p95("next task"), floor=0.5), pages.timings
