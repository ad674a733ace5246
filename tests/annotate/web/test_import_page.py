"""The admin upload page: staff only, a background job with a polled progress bar, the report."""
import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotate.models import ImportJob, LabelingConfig, Project, QueueItem, Solution
from annotate.tasks import import_pool_task
from jobs.states import JobState
from tests.conftest import wait_for


def jsonl(lines: list) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


GSM8K_LINES = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
     "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
    {"question": "A box holds 6 eggs. How many eggs are in 5 boxes?",
     "answer": "5 boxes hold 5 * 6 = <<5*6=30>>30 eggs.\n#### 30"},
    "{not json",
]


def upload(client, content: bytes, **fields):
    data = {"file": SimpleUploadedFile("gsm8k-sample.jsonl", content), "format": "auto", **fields}
    return client.post(reverse("annotate:import-list"), data)


@pytest.mark.django_db
def test_only_admins_see_the_upload_page(client, annotator):
    url = reverse("annotate:import-list")
    assert client.get(url).status_code == 302  # anonymous: to the login page
    client.force_login(annotator)
    assert client.get(url).status_code == 403
    assert upload(client, jsonl(GSM8K_LINES)).status_code == 403
    assert not ImportJob.objects.exists()


@pytest.mark.django_db
def test_upload_saves_the_file_and_queues_an_import_job(client, admin_user, django_capture_on_commit_callbacks):
    client.force_login(admin_user)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = upload(client, jsonl(GSM8K_LINES), source="upload-test")
    job = ImportJob.objects.get()
    assert response.status_code == 302 and response.url == reverse("annotate:import-detail", args=[job.pk])
    assert len(callbacks) == 1  # the task is sent only after the job row is committed
    assert (job.state, job.original_name, job.source, job.created_by) == (
        JobState.PENDING, "gsm8k-sample.jsonl", "upload-test", admin_user)
    saved = Path(job.path)
    assert saved.parent == Path(settings.UPLOADS_DIR) / "imports"
    assert saved.read_bytes() == jsonl(GSM8K_LINES)


@pytest.mark.django_db
def test_an_invalid_upload_shows_the_form_again(client, admin_user):
    client.force_login(admin_user)
    response = client.post(reverse("annotate:import-list"), {"format": "yaml"})
    assert response.status_code == 200
    assert response.context["form"].errors.keys() == {"file", "format"}


@pytest.mark.django_db
def test_the_job_runs_the_import_and_the_page_shows_progress_and_the_report(client, admin_user):
    client.force_login(admin_user)
    upload(client, jsonl(GSM8K_LINES))
    job = ImportJob.objects.get()

    url = reverse("annotate:import-detail", args=[job.pk])
    assert url == f"/jobs/import/{job.pk}/"
    page = client.get(url).content.decode()
    assert "<progress" in page and 'hx-trigger="every 1s"' in page  # still pending: polls
    assert f'hx-get="{url}"' in page  # its own URL: one URL per screen
    partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<div id="job-progress"') and "<html" not in partial

    assert import_pool_task(job.pk) == 2  # the task body, called as a plain function
    job.refresh_from_db()
    assert (job.state, job.format, job.total, job.done) == (JobState.SUCCEEDED, "gsm8k", 3, 3)
    assert (job.created, job.duplicates, job.errors) == (2, 0, 1)
    assert Solution.objects.filter(is_correct=True, is_reference=True).count() == 2

    partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "every 1s" not in partial  # finished: polling stops
    assert "2 created · 0 duplicates · 1 errors" in partial
    assert 'value="100"' in partial
    report = client.get(reverse("annotate:import-report", args=[job.pk]))
    lines = [json.loads(line) for line in b"".join(report.streaming_content).decode().splitlines()]
    assert [line["status"] for line in lines] == ["created", "created", "error"]

    listing = client.get(reverse("annotate:import-list")).content.decode()
    assert reverse("annotate:import-detail", args=[job.pk]) in listing and "gsm8k-sample.jsonl" in listing

    # Running the task again (a redelivery) changes nothing.
    import_pool_task(job.pk)
    assert Solution.objects.count() == 2


@pytest.mark.django_db
def test_an_atomic_upload_with_a_bad_line_fails_and_imports_nothing(client, admin_user):
    client.force_login(admin_user)
    upload(client, jsonl(GSM8K_LINES), atomic="on")
    job = ImportJob.objects.get()
    import_pool_task(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "nothing imported" in job.error
    assert not Solution.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("headers", [{}, {"HTTP_HX_REQUEST": "true", "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"}])
def test_the_job_page_is_whole_without_htmx_and_on_a_history_restore(client, admin_user, headers):
    client.force_login(admin_user)
    upload(client, jsonl(GSM8K_LINES[:1]))
    job = ImportJob.objects.get()
    response = client.get(reverse("annotate:import-detail", args=[job.pk]), **headers)
    assert response.status_code == 200 and "<html" in response.content.decode()
    assert "HX-Request" in response["Vary"]
    assert client.get(reverse("annotate:import-report", args=[job.pk])).status_code == 404  # not finished yet


@pytest.mark.django_db
def test_the_import_job_page_has_no_second_progress_url(client, admin_user):
    client.force_login(admin_user)
    upload(client, jsonl(GSM8K_LINES[:1]))
    job = ImportJob.objects.get()
    for old in (
        f"/imports/{job.pk}/progress", f"/imports/{job.pk}/",
        reverse("annotate:import-detail", args=[job.pk]) + "progress",
    ):
        assert client.get(old, HTTP_HX_REQUEST="true").status_code == 404, old


@pytest.mark.embedded
def test_a_real_worker_runs_an_uploaded_import_to_the_end(client, admin_user, celery_worker_process):
    client.force_login(admin_user)
    lines = [{"problem": f"What is {n} * 3?", "ground_truth_answer": str(3 * n),
              "steps": [f"{n} * 3 = {3 * n + n % 2}.", f"# Answer\n\n{3 * n + n % 2}"]} for n in range(40)]
    response = upload(client, jsonl(lines))
    job = ImportJob.objects.get()
    assert response.status_code == 302

    def finished():
        job.refresh_from_db()
        return job.state in (JobState.SUCCEEDED, JobState.FAILED)

    wait_for(finished, timeout=90)
    assert (job.state, job.created, job.errors) == (JobState.SUCCEEDED, 40, 0), job.error
    assert Solution.objects.filter(is_correct=True).count() == 20
    assert Solution.objects.filter(is_correct=False).count() == 20
    page = client.get(reverse("annotate:import-detail", args=[job.pk])).content.decode()
    assert "succeeded" in page and reverse("annotate:import-report", args=[job.pk]) in page
    # The worker queued them: labelable now, with no rescore in between.
    assert job.queued == 40 and QueueItem.objects.filter(status="available").count() == 40


MODEL_LINES = [
    {"problem": "What is 6 * 7?", "ground_truth_answer": "42", "solution": "6 * 7 = 42.\nThe answer is $\\boxed{42}$."},
    {"problem": "What is 6 * 7?", "ground_truth_answer": "42", "solution": "6 * 7 = 48.\nThe answer is $\\boxed{48}$."},
    {"problem": "What is 6 * 7?", "ground_truth_answer": "42", "solution": "6 * 7 = 42.\nThe answer is $\\boxed{42}$."},
    {"problem": "What is 9 - 2?", "ground_truth_answer": "7", "solution": "I am not sure."},
    {"problem": "What is 9 - 2?", "ground_truth_answer": "7", "solution": "9 - 2 = 7, so $\\boxed{7}$."},
]


@pytest.mark.django_db
def test_the_finished_import_page_shows_graded_counts_and_that_its_solutions_are_queued(client, admin_user):
    client.force_login(admin_user)
    url = reverse("annotate:import-detail", args=[upload_job(client, MODEL_LINES).pk])
    pending = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "When the import finishes, its new solutions go into the labeling queue at once" in pending
    import_pool_task(ImportJob.objects.get().pk)
    page = text_of(client.get(url, HTTP_HX_REQUEST="true"))
    assert "4 created · 1 duplicates · 0 errors" in page
    graded = "New solutions graded: <strong>2</strong> right · <strong>2</strong> wrong · <strong>0</strong> unknown"
    assert graded in page
    assert "Queued for labeling now: <strong>4</strong> solutions" in page
    assert "The others wait" not in page  # all four are queued
    assert reverse("scoring:models") in page and "next rescore" in page
    listing = client.get(reverse("annotate:import-list")).content.decode()
    assert "<td>2 / 2 / 0</td>" in listing and "./stepwise manage import_pool" in listing
    assert "manage.py" not in listing


@pytest.mark.django_db
def test_an_import_made_with_the_command_is_listed_with_the_uploads(client, admin_user, tmp_path):
    path = tmp_path / "from-the-shell.jsonl"
    path.write_bytes(jsonl(MODEL_LINES))
    call_command("import_pool", str(path), stdout=io.StringIO())
    job = ImportJob.objects.get()
    assert (job.state, job.original_name, job.created, job.queued) == (JobState.SUCCEEDED, path.name, 4, 4)
    client.force_login(admin_user)
    listing = client.get(reverse("annotate:import-list")).content.decode()
    assert reverse("annotate:import-detail", args=[job.pk]) in listing and "<td>from-the-shell.jsonl</td>" in listing
    assert "<td>2 / 2 / 0</td>" in listing
    # A file that cannot be read is a failed import, with its reason, not a missing one.
    with pytest.raises(CommandError):
        call_command("import_pool", str(tmp_path / "absent.jsonl"), stdout=io.StringIO())
    failed = ImportJob.objects.latest("pk")
    assert failed.state == JobState.FAILED and "absent.jsonl" in failed.error


@pytest.mark.django_db
def test_the_page_says_why_new_solutions_wait_when_the_queue_is_full(client, admin_user, settings):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"queue_size": 1})
    client.force_login(admin_user)
    job = upload_job(client, MODEL_LINES)
    import_pool_task(job.pk)
    page = text_of(client.get(reverse("annotate:import-detail", args=[job.pk]), HTTP_HX_REQUEST="true"))
    assert "Queued for labeling now: <strong>1</strong> solution of this file" in page
    assert "The others wait: the queue holds at most 1 solutions with open work" in page


def text_of(response) -> str:
    """The page with its whitespace runs collapsed, so assertions read as the sentences it shows."""
    return " ".join(response.content.decode().split())


def upload_job(client, lines: list) -> ImportJob:
    data = {"file": SimpleUploadedFile("model-output.jsonl", jsonl(lines)), "format": "auto"}
    client.post(reverse("annotate:import-list"), data)
    return ImportJob.objects.latest("pk")
