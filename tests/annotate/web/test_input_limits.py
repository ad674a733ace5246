"""Bounded input: every limit answers with an error naming it, and nothing is half-written after a refusal."""
import copy
import json
import os
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import caches
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, reviewing
from annotate.models import (
    Annotation,
    Completion,
    ExportJob,
    ImportJob,
    LabelingConfig,
    Problem,
    Project,
    RatingOverride,
    Solution,
    Step,
    StepLabel,
)
from annotate.pool import importing
from annotate.tasks import remove_expired_uploads_task
from jobs.states import JobState
from tests.annotations import PHASE1_LINE
from tests.config.test_settings import start_django
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

MODELS = (Problem, Solution, Step, Annotation, StepLabel, Completion, RatingOverride, ImportJob, ExportJob)


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in MODELS}


def generic(n: int, **fields) -> dict:
    line = {"problem": f"What is {n} + {n}?", "ground_truth_answer": str(2 * n),
            "steps": [f"{n} + {n} = {2 * n}.", f"# Answer\n\n{2 * n}"]}
    line.update(fields)
    return line


def write(tmp_path: Path, lines: list) -> Path:
    path = tmp_path / "pool.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def report_errors(path: Path) -> dict[int, str]:
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return {e["line"]: e["error"] for e in entries if e["status"] == "error"}


# --- import lines -------------------------------------------------------------------------------------------

def test_a_line_nested_3000_deep_is_one_line_error_and_the_rest_of_the_file_imports(tmp_path):
    lines = [generic(n) for n in range(1, 1501)] + [nested(3000)] + [generic(n) for n in range(1501, 2011)]
    report = tmp_path / "report.jsonl"
    summary = importing.import_pool(path=write(tmp_path, lines), format="generic", report_path=report)
    assert (summary.lines, summary.created, summary.errors) == (2011, 2010, 1)
    assert report_errors(report) == {
        1501: f"field 'line': nests deeper than {settings.STEPWISE_MAX_JSON_DEPTH} levels (STEPWISE_MAX_JSON_DEPTH)"
    }
    assert Solution.objects.count() == 2010


def test_an_atomic_import_with_a_too_deep_line_writes_nothing(tmp_path):
    before = row_counts()
    lines = [generic(n) for n in range(1, 1501)] + ['{"problem": ' + nested(3000) + "}"]
    summary = importing.import_pool(path=write(tmp_path, lines), format="generic", atomic=True)
    assert summary.rolled_back and summary.errors == 1
    assert row_counts() == before


def test_json_nested_within_the_limit_still_imports(tmp_path, settings):
    settings.STEPWISE_MAX_JSON_DEPTH = 4
    # Brackets inside strings nest nothing: this line is 3 deep though it holds 40 "[".
    line = generic(1, meta={"note": "[" * 40, "tags": ["a"]})
    assert importing.import_pool(path=write(tmp_path, [line]), format="generic").created == 1
    summary = importing.import_pool(path=write(tmp_path, [generic(2, meta={"a": {"b": {"c": [1]}}})]))
    assert summary.errors == 1 and "nests deeper than 4 levels" in summary.first_errors[0]


def test_a_line_over_the_byte_limit_is_skipped_unread_and_line_numbers_stay_right(tmp_path, settings):
    settings.STEPWISE_IMPORT_MAX_LINE_BYTES = 2048
    long_line = generic(2, problem="x" * 10_000)
    path = write(tmp_path, [generic(1), long_line, generic(3)])
    report = tmp_path / "report.jsonl"
    assert importing.count_lines(path) == 3
    summary = importing.import_pool(path=path, format="generic", report_path=report)
    assert (summary.lines, summary.created, summary.errors) == (3, 2, 1)
    assert report_errors(report) == {
        2: "field 'line': is longer than 2,048 bytes (STEPWISE_IMPORT_MAX_LINE_BYTES)"
    }
    assert set(Problem.objects.values_list("statement", flat=True)) == {"What is 1 + 1?", "What is 3 + 3?"}


def test_a_line_of_exactly_the_byte_limit_imports(tmp_path, settings):
    line = json.dumps(generic(1))
    settings.STEPWISE_IMPORT_MAX_LINE_BYTES = len(line.encode())
    assert importing.import_pool(path=write(tmp_path, [line]), format="generic").created == 1


def test_too_many_steps_or_too_long_a_step_is_a_line_error_naming_the_limit(tmp_path, settings):
    settings.STEPWISE_IMPORT_MAX_STEPS = 5
    settings.STEPWISE_IMPORT_MAX_STEP_CHARS = 200
    lines = [
        generic(1, steps=[f"step {i}" for i in range(6)]),
        generic(2, steps=["ok", "y" * 201]),
        generic(3, steps=[f"step {i}" for i in range(5)]),
        # Split from text too: six paragraphs are six steps.
        {"problem": "p", "ground_truth_answer": "1",
         "solution": "\n\n".join(f"We add {i} and {i} to get {2 * i}." for i in range(6))},
    ]
    report = tmp_path / "report.jsonl"
    summary = importing.import_pool(path=write(tmp_path, lines), format="generic", report_path=report)
    assert (summary.created, summary.errors) == (1, 3)
    assert report_errors(report) == {
        1: "field 'steps': has 6 steps; the limit is 5 (STEPWISE_IMPORT_MAX_STEPS)",
        2: "field 'steps[1]': has 201 characters; the limit is 200 (STEPWISE_IMPORT_MAX_STEP_CHARS)",
        4: "field 'steps': has 6 steps; the limit is 5 (STEPWISE_IMPORT_MAX_STEPS)",
    }
    assert Step.objects.count() == 5


def test_a_prm800k_alternative_completion_is_held_to_the_step_limit_too(tmp_path, settings):
    settings.STEPWISE_IMPORT_MAX_STEP_CHARS = 150
    line = copy.deepcopy(PHASE1_LINE)
    line["label"]["steps"][0]["completions"].append({"text": "z" * 151, "rating": -1, "flagged": False})
    summary = importing.import_pool(path=write(tmp_path, [line]), format="prm800k")
    assert summary.errors == 1, summary.first_errors
    assert "label.steps[0].completions[2].text': has 151 characters" in summary.first_errors[0]
    assert not Solution.objects.exists()


# --- uploads and request bodies -----------------------------------------------------------------------------

def upload_folder_files() -> set[Path]:
    return set((Path(settings.UPLOADS_DIR) / "imports").glob("*"))


def test_an_upload_over_the_limit_gets_413_and_nothing_is_stored(client, admin_user, settings):
    settings.STEPWISE_MAX_UPLOAD_BYTES = 4096
    client.force_login(admin_user)
    files, before = upload_folder_files(), row_counts()
    content = "".join(json.dumps(generic(n)) + "\n" for n in range(200)).encode()
    response = client.post(reverse("annotate:import-list"),
                           {"file": SimpleUploadedFile("big.jsonl", content), "format": "auto"})
    assert response.status_code == 413
    assert "the limit is 4,096 bytes (STEPWISE_MAX_UPLOAD_BYTES)" in response.content.decode()
    assert (upload_folder_files(), row_counts()) == (files, before)
    # The API's upload endpoint is held to the same limit.
    api = APIClient()
    api.force_authenticate(admin_user)
    response = api.post("/api/imports", {"file": SimpleUploadedFile("big.jsonl", content)}, format="multipart")
    assert response.status_code == 413 and "STEPWISE_MAX_UPLOAD_BYTES" in response.json()["detail"]
    assert (upload_folder_files(), row_counts()) == (files, before)


def test_only_the_upload_views_take_uploads_past_the_body_limit(client, admin_user, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    client.force_login(admin_user)
    content = "".join(json.dumps(generic(n)) + "\n" for n in range(200)).encode()
    response = client.post(reverse("annotate:label-start"), {"file": SimpleUploadedFile("big.jsonl", content)})
    assert response.status_code == 413 and "STEPWISE_MAX_BODY_BYTES" in response.content.decode()
    response = client.post(reverse("annotate:import-list"),
                           {"file": SimpleUploadedFile("big.jsonl", content), "format": "auto"})
    assert response.status_code == 302 and ImportJob.objects.count() == 1


def test_the_upload_form_states_the_limit(client, admin_user, settings):
    settings.STEPWISE_MAX_UPLOAD_BYTES = 8 * 2**20
    client.force_login(admin_user)
    assert "at most 8 MiB" in client.get(reverse("annotate:import-list")).content.decode()


def session_client(user) -> APIClient:
    """A logged-in browser session that must send CSRF tokens: the check parses the body first."""
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(user)
    api.cookies["csrftoken"] = "a" * 32  # a cookie but no header: the check looks in the body
    return api


def token_client(user) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return api


@pytest.mark.parametrize("make_client", [session_client, token_client])
@pytest.mark.parametrize("url", ["/api/score", "/api/exports"])
@pytest.mark.parametrize("depth", [2000, 100])  # past Python's recursion limit, and within it
def test_a_body_nested_2000_deep_gets_400_never_500(admin_user, make_client, url, depth):
    before = row_counts()
    body = '{"problem": "p", "steps": ' + nested(depth) + "}"
    response = make_client(admin_user).post(url, body, content_type="application/json")
    assert response.status_code == 400
    assert "nested deeper than" in response.json()["detail"]
    assert row_counts() == before


def test_a_50_mb_json_body_is_refused_unread(admin_user):
    body = b'{"problem": "' + b"x" * (50 * 2**20) + b'", "steps": ["a"]}'
    response = token_client(admin_user).post("/api/score", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["detail"] == (
        f"request body too large: the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes (STEPWISE_MAX_BODY_BYTES)"
    )


def test_the_json_parser_itself_stops_at_the_body_limit(admin_user, settings):
    # Without the middleware's Content-Length check (a body without one, or another
    # entry point), DRF's parser reads the stream itself: it must stop at the limit too.
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != "infra.limits.BodySizeLimitMiddleware"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    before = row_counts()
    body = json.dumps({"format": "prm800k", "generations": [1] * 1000})
    response = token_client(admin_user).post("/api/exports", body, content_type="application/json")
    assert response.status_code == 413 and "1,024 bytes" in response.json()["detail"]
    assert row_counts() == before


def test_an_oversize_form_post_to_a_page_gets_413(annotator, client):
    client.force_login(annotator)
    body = "note=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = client.post(reverse("annotate:label-start"), body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413 and "STEPWISE_MAX_BODY_BYTES" in response.content.decode()


# --- notes and reasons --------------------------------------------------------------------------------------

@pytest.fixture
def task(annotator):
    SolutionFactory(steps=["one", "two"])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def test_a_note_over_the_limit_is_refused_and_the_task_stays_open(client, annotator, task):
    client.force_login(annotator)
    data = {"finish_reason": "give_up", "note": "n" * (labeling.MAX_NOTE_CHARS + 1)}
    response = client.post(reverse("annotate:label-submit", args=[task.pk]), data, HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and f"at most {labeling.MAX_NOTE_CHARS} characters" in response.content.decode()
    task.refresh_from_db()
    assert (task.status, task.finish_note) == (Annotation.Status.IN_PROGRESS, "")
    data["note"] = "n" * labeling.MAX_NOTE_CHARS
    client.post(reverse("annotate:label-submit", args=[task.pk]), data, HTTP_HX_REQUEST="true")
    task.refresh_from_db()
    assert task.status == Annotation.Status.SUBMITTED and len(task.finish_note) == labeling.MAX_NOTE_CHARS


def test_a_reviewer_override_note_over_the_limit_is_refused(task, reviewer):
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=1)
    labeling.submit(annotation=task)
    with pytest.raises(labeling.LabelingError, match="at most 2000 characters"):
        reviewing.override_rating(annotation=task, index=0, rating=-1, reviewer=reviewer, note="r" * 2001)
    assert not RatingOverride.objects.exists()


def test_a_human_completion_over_the_limit_is_refused(task):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"allow_human_completion": True})
    labeling.rate(annotation=task, index=0, rating=-1)
    with pytest.raises(labeling.LabelingError, match="1 to 5000 characters"):
        labeling.write_completion(annotation=task, index=0, text="c" * 5001)
    assert StepLabel.objects.get(annotation=task, index=0).human_completion is None


# --- rate limit on /api/score -------------------------------------------------------------------------------

def test_api_score_is_rate_limited_per_user(reviewer, admin_user, settings):
    settings.STEPWISE_SCORE_RATE = "3/minute"
    caches["throttle"].clear()
    reviewer_client, admin_client = token_client(reviewer), token_client(admin_user)
    # A bad body is answered 400 without a model or worker, and still counts.
    codes = [reviewer_client.post("/api/score", {}, format="json").status_code for _ in range(4)]
    assert codes == [400, 400, 400, 429]
    assert admin_client.post("/api/score", {}, format="json").status_code == 400  # each user has their own budget


@pytest.mark.parametrize("value", ["lots", "0/minute", "10/fortnight", "10"])
def test_a_bad_score_rate_stops_start_up_naming_the_variable(tmp_path, value):
    started = start_django(tmp_path, STEPWISE_SCORE_RATE=value)
    assert started.returncode != 0 and "ImproperlyConfigured: STEPWISE_SCORE_RATE" in started.stderr


def test_a_score_rate_may_spell_its_period_short_or_long(tmp_path):
    for value in ("5/m", "5/min", "5/minute", "100/day"):
        started = start_django(tmp_path, "print(settings.STEPWISE_SCORE_RATE)", STEPWISE_SCORE_RATE=value)
        assert started.returncode == 0 and started.stdout.strip() == value, started.stderr


# --- retention ----------------------------------------------------------------------------------------------

def aged(path: Path, days: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text("{}\n")
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


def test_uploads_and_reports_past_retention_are_deleted_unless_their_job_is_live(settings, tmp_path):
    settings.STEPWISE_RETENTION_DAYS = 30
    settings.UPLOADS_DIR = tmp_path
    folder = tmp_path / "imports"
    old_done = ImportJob.objects.create(path=str(aged(folder / "old-done.jsonl", 40)),
                                        report_path=str(aged(folder / "old-done-report.jsonl", 40)))
    ImportJob.objects.filter(pk=old_done.pk).update(state=JobState.SUCCEEDED, finished_at="2020-01-01T00:00Z")
    running = ImportJob.objects.create(path=str(aged(folder / "old-running.jsonl", 40)), state=JobState.RUNNING)
    orphan = aged(folder / "orphan.jsonl", 31)
    recent = aged(folder / "recent.jsonl", 2)
    removed = remove_expired_uploads_task()
    assert removed == 3
    assert not Path(old_done.path).exists() and not Path(old_done.report_path).exists() and not orphan.exists()
    assert Path(running.path).exists() and recent.exists()
    assert ImportJob.objects.count() == 2  # the rows stay as history
    settings.STEPWISE_RETENTION_DAYS = 0
    aged(folder / "orphan.jsonl", 400)
    assert remove_expired_uploads_task() == 0 and orphan.exists()


def test_a_real_worker_runs_the_retention_task_with_the_default_period(celery_worker_process):
    folder = Path(settings.UPLOADS_DIR) / "imports"
    expired, young = aged(folder / "expired-upload.jsonl", 31), aged(folder / "young-upload.jsonl", 29)
    assert remove_expired_uploads_task.delay().get(timeout=90) >= 1
    assert not expired.exists() and young.exists()
    young.unlink()
