"""Security settings and authorization: login lockout, bounded sessions, a deploy
check that passes for production settings, an enforced CSP on every response, templates
without inline script, nothing in the API that tells an annotator a task is gold, and export
downloads that serve only files in the exports folder."""
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from axes.models import AccessAttempt
from csp.constants import NONCE
from csp.decorators import csp_update
from csp.middleware import CSPMiddleware as DjangoCSPMiddleware
from django.conf import settings
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.labeling import queueing
from annotate.models import Annotation, ExportJob, ImportJob, LabelingConfig, Project
from infra.content_security import CSPMiddleware
from infra.login_lockout import DEVICE_COOKIE, FREE_FAILURES
from jobs.states import JobState
from tests.conftest import REPO_ROOT
from tests.factories import SolutionFactory, user_with_role

PASSWORD = "pass-for-tests"
LOGIN_FORMS = ["/accounts/login/", "/admin/login/"]
PRODUCTION_ENVIRONMENT = {
    "DEBUG": "false",
    "SECRET_KEY": "k7#Vq9!x2Lm$Pz4@Rw8^Tn6&Yb3*Hc5(Jd1)Fg0-Ks9+Qe7=Ua2~Io4;Zx6",
    "ALLOWED_HOSTS": "stepwise.example.org",
    "STEPWISE_BEHIND_TLS_PROXY": "true",
    "STEPWISE_SSL_REDIRECT": "true",
    "STEPWISE_SECURE_COOKIES": "true",
    "STEPWISE_HSTS_SECONDS": "31536000",
    "STEPWISE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "STEPWISE_HSTS_PRELOAD": "true",
}


def deploy_check(extra: dict[str, str]) -> subprocess.CompletedProcess:
    tls = ("STEPWISE_HSTS", "STEPWISE_SSL", "STEPWISE_SECURE", "STEPWISE_BEHIND")
    # DJANGO_ALLOW_ASYNC_UNSAFE is the browser tests' (tests/browsing.py), set in this
    # process once they are collected; a deployment never has it.
    harness = ("DJANGO_ALLOW_ASYNC_UNSAFE",)
    env = {k: v for k, v in os.environ.items() if not k.startswith(tls) and k not in harness}
    env.update(extra)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


# --- settings --------------------------------------------------------------------------

def test_the_deploy_check_is_clean_for_the_production_settings():
    result = deploy_check(PRODUCTION_ENVIRONMENT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_without_the_tls_variables_the_deploy_check_names_what_is_missing():
    development = {k: v for k, v in PRODUCTION_ENVIRONMENT.items() if not k.startswith("STEPWISE_")}
    result = deploy_check(development)
    assert result.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in result.stderr + result.stdout


def test_docker_compose_turns_tls_redirect_hsts_and_secure_cookies_on():
    compose = (REPO_ROOT / "docker-compose.yml").read_text()
    for name in ("STEPWISE_BEHIND_TLS_PROXY", "STEPWISE_SSL_REDIRECT", "STEPWISE_SECURE_COOKIES",
                 "STEPWISE_HSTS_INCLUDE_SUBDOMAINS", "STEPWISE_HSTS_PRELOAD"):
        assert re.search(rf"{name}: \$\{{{name}:-true\}}", compose), name
    assert "STEPWISE_HSTS_SECONDS: ${STEPWISE_HSTS_SECONDS:-31536000}" in compose


@pytest.mark.django_db
def test_a_session_lasts_the_configured_age(client):
    user_with_role("kim", "annotator")
    response = client.post(reverse("login"), {"username": "kim", "password": PASSWORD})
    assert response.status_code == 302
    assert response.cookies["sessionid"]["max-age"] == settings.SESSION_COOKIE_AGE == 12 * 3600


# --- login lockout ---------------------------------------------------------------------

def post_login(client, url: str, username: str, password: str, address: str):
    return client.post(url, {"username": username, "password": password, "next": "/"}, REMOTE_ADDR=address)


@pytest.mark.embedded
@pytest.mark.django_db
@pytest.mark.parametrize("url", LOGIN_FORMS)
def test_repeated_wrong_passwords_lock_out_that_username_from_that_address(client, url):
    user_with_role("boss", "admin", is_staff=True, is_superuser=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert post_login(client, url, "boss", "wrong", "10.0.0.1").status_code == 200  # the form again
    assert post_login(client, url, "boss", "wrong", "10.0.0.1").status_code == 429  # the last one allowed
    locked = post_login(client, url, "boss", PASSWORD, "10.0.0.1")
    assert locked.status_code == 429  # even the right password, until the lockout ends
    assert "_auth_user_id" not in client.session
    # The same person from another address, and another user from the attacker's, still get in.
    assert post_login(client, url, "boss", PASSWORD, "10.0.0.2").status_code == 302


@pytest.mark.django_db
def test_a_lockout_on_one_login_form_holds_on_the_other(client):
    user_with_role("boss", "admin", is_staff=True, is_superuser=True)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        post_login(client, "/accounts/login/", "boss", "wrong", "10.0.0.1")
    assert post_login(client, "/admin/login/", "boss", PASSWORD, "10.0.0.1").status_code == 429


@pytest.mark.django_db
def test_a_right_password_before_the_limit_clears_the_count(client):
    user_with_role("kim", "annotator")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        post_login(client, "/accounts/login/", "kim", "wrong", "10.0.0.1")
    time.sleep(1.05)  # the growing delay after the fourth failure (test_each_failure_past_a_few_...)
    assert post_login(client, "/accounts/login/", "kim", PASSWORD, "10.0.0.1").status_code == 302
    client.logout()
    post_login(client, "/accounts/login/", "kim", "wrong", "10.0.0.1")
    assert post_login(client, "/accounts/login/", "kim", PASSWORD, "10.0.0.1").status_code == 302


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_the_lockout_holds_under_50_parallel_wrong_passwords(live_server):
    """50 clients at once, each with its own session and CSRF token, over the real server."""
    user_with_role("kim", "annotator")
    url = f"{live_server.url}/accounts/login/"
    statuses: list[int] = []
    start = threading.Barrier(50)

    def attempt(password: str) -> int:
        session = requests.Session()
        session.get(url, timeout=60)
        form = {"username": "kim", "password": password, "csrfmiddlewaretoken": session.cookies["csrftoken"]}
        return session.post(url, data=form, allow_redirects=False, timeout=120).status_code

    def attacker():
        start.wait()
        statuses.append(attempt("wrong"))

    threads = [threading.Thread(target=attacker) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(set(statuses)) in ([200, 429], [200], [429]) and len(statuses) == 50
    # The first few are plain failures, and never more than the limit allows: axes counts a failure
    # (F() + 1), then reads the total, which can already hold concurrent failures, so a request
    # below the limit may be answered 429 too (3 of 5 were seen), but none at or past it gets 200.
    assert 1 <= statuses.count(200) <= settings.AXES_FAILURE_LIMIT - 1
    # Every failure was counted (no lost increments), and the right password is refused now.
    assert AccessAttempt.objects.get(username="kim").failures_since_start == 50
    assert attempt(PASSWORD) == 429
    print(f"50 parallel wrong passwords: {statuses.count(200)} answered 200, {statuses.count(429)} answered 429")



def new_browser(address: str = "10.0.0.1") -> Client:
    return Client(REMOTE_ADDR=address)


def log_out(browser: Client) -> None:
    """Log out as a browser does (the test client's logout() forgets every cookie)."""
    assert browser.post(reverse("logout")).status_code == 302


@pytest.mark.embedded
@pytest.mark.django_db
@pytest.mark.parametrize("url", LOGIN_FORMS)
def test_a_browser_that_logged_in_before_is_not_locked_out_by_someone_elses_failures(url):
    user_with_role("boss", "admin", is_staff=True, is_superuser=True)
    user_with_role("mallory", "admin", is_staff=True, is_superuser=True)
    office = "10.0.0.1"  # everyone behind one NAT
    own = new_browser(office)
    assert post_login(own, url, "boss", PASSWORD, office).status_code == 302
    assert own.cookies[DEVICE_COOKIE]["httponly"]
    log_out(own)
    attacker = new_browser(office)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        post_login(attacker, url, "boss", "wrong", office)
    assert post_login(attacker, url, "boss", PASSWORD, office).status_code == 429  # the pair is locked
    assert post_login(own, url, "boss", PASSWORD, office).status_code == 302  # but not the known browser
    log_out(own)
    # A device cookie the attacker makes up, or earns as another user, opens nothing.
    attacker.cookies[DEVICE_COOKIE] = "forged"
    assert post_login(attacker, url, "boss", PASSWORD, office).status_code == 429
    assert post_login(attacker, url, "mallory", PASSWORD, office).status_code == 302
    log_out(attacker)
    assert post_login(attacker, url, "boss", PASSWORD, office).status_code == 429
    # The known browser's own wrong passwords lock it, after as many as a pair gets.
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert post_login(own, url, "boss", "wrong", office).status_code == 200
    assert post_login(own, url, "boss", "wrong", office).status_code == 429
    assert post_login(own, url, "boss", PASSWORD, office).status_code == 429


@pytest.mark.embedded
@pytest.mark.django_db
def test_one_address_trying_many_user_names_is_throttled(settings):
    settings.STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT = 6
    user_with_role("kim", "annotator")
    user_with_role("lee", "annotator")
    known = new_browser("10.0.0.9")
    assert post_login(known, "/accounts/login/", "lee", PASSWORD, "10.0.0.9").status_code == 302
    log_out(known)
    sprayer = new_browser("10.0.0.9")
    names = [f"user{n}" for n in range(settings.STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT)]
    statuses = [post_login(sprayer, "/accounts/login/", name, "Summer2024!", "10.0.0.9").status_code
                for name in names]
    # One failure per user name, far below the per-pair limit, yet the address is stopped at its own.
    assert statuses == [200] * (len(names) - 1) + [429]
    assert post_login(sprayer, "/accounts/login/", "another", "Summer2024!", "10.0.0.9").status_code == 429
    assert AccessAttempt.objects.filter(username="another").exists()  # still counted, never checked
    # A user with no device cookie at that address waits too; elsewhere, or on a known browser, not.
    assert post_login(new_browser("10.0.0.9"), "/accounts/login/", "kim", PASSWORD, "10.0.0.9").status_code == 429
    assert post_login(new_browser("10.0.0.8"), "/accounts/login/", "kim", PASSWORD, "10.0.0.8").status_code == 302
    assert post_login(known, "/accounts/login/", "lee", PASSWORD, "10.0.0.9").status_code == 302


@pytest.mark.django_db
def test_each_failure_past_a_few_makes_the_pair_wait_twice_as_long(settings):
    settings.AXES_FAILURE_LIMIT = 50  # the delays alone, far below the lockout
    user_with_role("kim", "annotator")
    browser = new_browser("10.0.0.5")
    for _ in range(FREE_FAILURES + 1):  # the last starts the delays
        assert post_login(browser, "/accounts/login/", "kim", "wrong", "10.0.0.5").status_code == 200
    waits = []
    for _ in range(4):
        refused = post_login(browser, "/accounts/login/", "kim", PASSWORD, "10.0.0.5")
        assert refused.status_code == 429 and "_auth_user_id" not in browser.session
        waits.append(int(refused["Retry-After"]))
    # Asking while waiting counts as a failure too: each answer waits twice as long as the last.
    assert waits == [1, 2, 4, 8]
    # The delay is the pair's: the same user elsewhere, another user here, get in at once.
    assert post_login(new_browser("10.0.0.6"), "/accounts/login/", "kim", PASSWORD, "10.0.0.6").status_code == 302
    user_with_role("lee", "annotator")
    assert post_login(new_browser("10.0.0.5"), "/accounts/login/", "lee", PASSWORD, "10.0.0.5").status_code == 302


@pytest.mark.django_db
def test_a_delay_grows_no_longer_than_the_lockout_window(settings):
    settings.AXES_FAILURE_LIMIT = 10**6
    settings.STEPWISE_LOGIN_ADDRESS_FAILURE_LIMIT = 10**6
    user_with_role("kim", "annotator")
    post_login(new_browser("10.0.0.5"), "/accounts/login/", "kim", "wrong", "10.0.0.5")
    AccessAttempt.objects.update(failures_since_start=FREE_FAILURES + 200)  # 2**200 s, uncapped
    refused = post_login(new_browser("10.0.0.5"), "/accounts/login/", "kim", PASSWORD, "10.0.0.5")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()


@pytest.mark.django_db
def test_a_thousand_wrong_passwords_neither_get_in_nor_keep_the_real_user_out():
    user_with_role("kim", "annotator")
    office = "10.0.0.7"  # the attacker shares the real user's address
    own = new_browser(office)
    assert post_login(own, "/accounts/login/", "kim", PASSWORD, office).status_code == 302
    log_out(own)
    attacker, statuses = new_browser(office), []
    started = time.monotonic()
    for n in range(1000):
        statuses.append(post_login(attacker, "/accounts/login/", "kim", f"guess-{n}", office).status_code)
    assert time.monotonic() - started < 300  # bounded: never waits out a delay itself
    assert "_auth_user_id" not in attacker.session
    assert set(statuses[FREE_FAILURES + 1:]) == {429} and 200 in statuses
    # Every guess was counted; even the right password is refused to the attacker now.
    assert AccessAttempt.objects.get(username="kim").failures_since_start == 1000
    refused = post_login(attacker, "/accounts/login/", "kim", PASSWORD, office)
    assert refused.status_code == 429 and int(refused["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    # The real user, on the browser that logged in before, is not held by the delay or the lockout.
    assert post_login(own, "/accounts/login/", "kim", PASSWORD, office).status_code == 302


# --- wrong API tokens ------------------------------------------------------------------

def token_get(address: str, key: str):
    return APIClient().get("/api/annotations", HTTP_AUTHORIZATION=f"Token {key}", REMOTE_ADDR=address)


@pytest.mark.django_db
def test_wrong_api_tokens_past_the_limit_get_429_but_good_tokens_never_do(annotator, settings):
    settings.STEPWISE_BAD_TOKEN_LIMIT = 5
    good = Token.objects.create(user=annotator).key
    scanner = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.9"  # the counts outlive the test db
    for _ in range(3):
        assert token_get(scanner, good).status_code == 200  # good ones are not counted
    statuses = [token_get(scanner, uuid.uuid4().hex).status_code for _ in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    refused = token_get(scanner, uuid.uuid4().hex)
    assert 0 < int(refused["Retry-After"]) <= 600
    # The same address's good token still works, and another address's wrong one is a plain 401.
    assert token_get(scanner, good).status_code == 200
    assert token_get(f"{scanner}1"[:-1] + "8", uuid.uuid4().hex).status_code == 401


# --- the API schema ------------------------------------------------------------------------

@pytest.mark.embedded
@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/", "/api/docs/?script="])
def test_the_api_schema_and_swagger_are_for_reviewers_and_admins_only(client, annotator, reviewer, admin_user,
                                                                       path):
    client.force_login(annotator)
    assert client.get(path).status_code == 403
    api = APIClient()
    api.force_authenticate(annotator)
    assert api.get(path).status_code == 403
    for user in (reviewer, admin_user):
        client.force_login(user)
        assert client.get(path).status_code == 200


# --- the Content-Security-Policy ---------------------------------------------------------

@pytest.mark.embedded
@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/", "/api/annotations", "/no-such-page/",
                                  "/static/js/math.js"])
def test_every_response_carries_the_enforced_csp(client, path):
    policy = client.get(path)["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert directives["default-src"] == "'self'" and directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'" and directives["base-uri"] == "'none'"


def _policy_answers(middleware_class, view):
    """The CSP headers `middleware_class` puts on `view`'s answer to a GET."""
    request = RequestFactory().get("/somewhere")
    middleware = middleware_class(view)
    middleware.process_request(request)
    response = middleware.process_response(request, view(request))
    return {h: response.get(h) for h in ("Content-Security-Policy", "Content-Security-Policy-Report-Only")}


def _nonce_using_view(request):
    return HttpResponse(f'<script nonce="{request.csp_nonce}"></script>')


@csp_update({"img-src": ["https://example.org"]})
def _view_with_own_policy(request):
    return HttpResponse("")


@pytest.mark.parametrize("view", [lambda request: HttpResponse(""), _nonce_using_view, _view_with_own_policy],
                         ids=["plain", "nonce", "per-view policy"])
def test_the_policy_built_once_is_the_one_django_csp_builds(view, settings):
    """Prebuilt for a plain answer; a nonce or a decorator's policy still reaches the header."""
    directives = settings.CONTENT_SECURITY_POLICY["DIRECTIVES"]
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {**directives, "script-src": [*directives["script-src"], NONCE]}}
    ours, theirs = _policy_answers(CSPMiddleware, view), _policy_answers(DjangoCSPMiddleware, view)
    nonce = re.compile(r"'nonce-[^']+'")
    assert {h: v and nonce.sub("'nonce'", v) for h, v in ours.items()} == \
        {h: v and nonce.sub("'nonce'", v) for h, v in theirs.items()}
    assert ("'nonce-" in ours["Content-Security-Policy"]) == (view is _nonce_using_view)
    assert ("https://example.org" in ours["Content-Security-Policy"]) == (view is _view_with_own_policy)


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=|\bhx-on|javascript:", re.IGNORECASE)


@pytest.mark.parametrize("template", sorted((REPO_ROOT / "templates").rglob("*.html")), ids=lambda p: p.name)
def test_no_template_has_inline_script_or_handlers(template):
    text = template.read_text()
    assert not INLINE_SCRIPT.search(text)
    assert not INLINE_HANDLER.search(text)


def test_htmx_is_configured_for_the_csp():
    base = (REPO_ROOT / "templates" / "base.html").read_text()
    config = re.search(r"""<meta name="htmx-config" content='([^']*)'>""", base).group(1)
    assert json.loads(config) == {"selfRequestsOnly": True, "allowEval": False, "allowScriptTags": False,
                                  "includeIndicatorStyles": False,
                                  # No page snapshots kept for the back button: it loads the page.
                                  "historyCacheSize": 0, "refreshOnHistoryMiss": True}


# --- the API and gold items ------------------------------------------------------------

@pytest.fixture
def gold_task(annotator):
    """The annotator's own in-progress task, which is a gold (quality-control) item."""
    SolutionFactory(is_gold=True, steps=["One.", "Two."])
    config = LabelingConfig.of(Project.objects.sole())
    config.qc_rate = 1.0
    config.save()
    task = queueing.claim_next(annotator=annotator)
    assert task.is_quality_control and task.status == Annotation.Status.IN_PROGRESS
    return task


@pytest.mark.embedded
@pytest.mark.django_db
def test_the_api_never_tells_an_annotator_their_task_is_gold(annotator, gold_task):
    api = APIClient()
    api.force_authenticate(annotator)
    shown = api.get(f"/api/annotations/{gold_task.pk}").json()
    assert shown["id"] == gold_task.pk and shown["step_labels"]
    for field in ("is_quality_control", "is_initial_screening", "generation"):
        assert field not in shown
    listed = api.get("/api/annotations").json()["results"]
    assert listed and not {"is_quality_control", "is_initial_screening", "generation"} & set(listed[0])
    # Nor does a filter: asking for non-QC items still lists the gold one.
    assert [a["id"] for a in api.get("/api/annotations?is_quality_control=false").json()["results"]] == [gold_task.pk]


@pytest.mark.django_db
def test_reviewers_still_see_and_filter_on_quality_control(reviewer, gold_task):
    api = APIClient()
    api.force_authenticate(reviewer)
    assert api.get(f"/api/annotations/{gold_task.pk}").json()["is_quality_control"] is True
    assert api.get("/api/annotations?is_quality_control=false").json()["results"] == []


# --- export paths -------------------------------------------------------------------------

@pytest.fixture
def outside_export(admin_user, tmp_path):
    """A succeeded export whose path was changed to a file outside the exports folder."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    return ExportJob.objects.create(format="prm800k", state=JobState.SUCCEEDED, path=str(secret), lines=1)


@pytest.mark.django_db
def test_a_download_outside_the_exports_folder_is_refused(client, admin_user, outside_export):
    client.force_login(admin_user)
    assert client.get(reverse("annotate:export-download", args=[outside_export.pk])).status_code == 404
    assert client.get(f"/api/exports/{outside_export.pk}/download").status_code == 404
    # A link planted in the folder is followed to where it points, and refused too.
    link = Path(settings.EXPORTS_DIR) / f"link-{outside_export.pk}.jsonl"
    link.symlink_to(outside_export.path)
    outside_export.path = str(link)
    outside_export.save(update_fields=["path"])
    assert client.get(reverse("annotate:export-download", args=[outside_export.pk])).status_code == 404
    link.unlink()


@pytest.mark.django_db
def test_a_download_inside_the_exports_folder_is_served(client, admin_user):
    path = Path(settings.EXPORTS_DIR) / "export-inside.jsonl"
    path.write_text('{"ok": true}\n')
    job = ExportJob.objects.create(format="prm800k", state=JobState.SUCCEEDED, path=str(path), lines=1)
    client.force_login(admin_user)
    response = client.get(reverse("annotate:export-download", args=[job.pk]))
    assert response.status_code == 200 and b"".join(response.streaming_content) == b'{"ok": true}\n'



@pytest.mark.django_db
def test_an_import_report_outside_the_uploads_folder_is_refused(client, admin_user, tmp_path):
    secret = tmp_path / "secret.jsonl"
    secret.write_text("root:x:0:0\n")
    job = ImportJob.objects.create(path=str(tmp_path / "pool.jsonl"), state=JobState.SUCCEEDED,
                                   report_path=str(secret), finished_at=timezone.now())
    client.force_login(admin_user)
    assert client.get(reverse("annotate:import-report", args=[job.pk])).status_code == 404
    assert reverse("annotate:import-report", args=[job.pk]) not in client.get(
        reverse("annotate:import-detail", args=[job.pk])).content.decode()
    # Nor through a path that climbs out of the folder, or a link planted in it.
    inside = Path(settings.UPLOADS_DIR) / "imports"
    inside.mkdir(parents=True, exist_ok=True)
    link = inside / f"link-{job.pk}-report.jsonl"
    link.symlink_to(secret)
    climbing = f"{inside}/{os.path.relpath(secret, inside)}"  # starts inside, ends at the secret
    assert Path(climbing).read_text() == secret.read_text()
    for path in (climbing, str(link)):
        ImportJob.objects.filter(pk=job.pk).update(report_path=path)
        assert client.get(reverse("annotate:import-report", args=[job.pk])).status_code == 404
    link.unlink()
    # A report where the upload page puts it is served.
    report = inside / f"pool-{job.pk}-report.jsonl"
    report.write_text('{"line": 1}\n')
    ImportJob.objects.filter(pk=job.pk).update(report_path=str(report))
    response = client.get(reverse("annotate:import-report", args=[job.pk]))
    assert response.status_code == 200 and b"".join(response.streaming_content) == b'{"line": 1}\n'
    report.unlink()


@pytest.mark.django_db
def test_job_paths_are_never_editable_in_the_django_admin(client, admin_user, outside_export):
    client.force_login(admin_user)
    page = client.get(reverse("admin:annotate_exportjob_change", args=[outside_export.pk])).content.decode()
    assert 'name="path"' not in page and outside_export.path in page  # shown, not editable
    client.post(reverse("admin:annotate_exportjob_change", args=[outside_export.pk]),
                {"path": "/etc/passwd", "format": "prm800k", "state": "succeeded", "options": "{}"})
    outside_export.refresh_from_db()
    assert outside_export.path != "/etc/passwd"
    assert client.get(reverse("admin:annotate_exportjob_add")).status_code == 403
    assert client.get(reverse("admin:annotate_importjob_add")).status_code == 403
