"""The admin export page: form -> ExportJob -> worker -> progress partial -> download."""
import json

import pytest
from django.utils.html import escape

from annotate.management.commands import export_prm800k
from annotate.models import ExportJob
from annotate.pool import exporting
from annotate.web.api import serializers
from bench.commands import bench_export
from jobs.states import JobState
from tests.annotations import annotate
from tests.conftest import option_choices, wait_for
from tests.factories import SolutionFactory


@pytest.mark.django_db
def test_only_admins_reach_the_export_pages(client, annotator, reviewer, admin_user):
    assert client.get("/exports/").status_code == 302  # to the login page
    for user in (annotator, reviewer):
        client.force_login(user)
        assert client.get("/exports/").status_code == 403
        assert client.post("/exports/", {"format": "trl"}).status_code == 403
    client.force_login(admin_user)
    page = client.get("/exports/")
    assert page.status_code == 200 and b"Start export" in page.content


@pytest.mark.django_db
@pytest.mark.parametrize("name", exporting.FORMATS)
def test_every_registered_format_is_offered_by_the_page_the_commands_and_the_api(client, admin_user, name):
    client.force_login(admin_user)
    page = client.get("/exports/").content.decode()
    assert f'<option value="{name}"' in page and escape(exporting.FORMATS[name].help) in page
    assert name in option_choices(export_prm800k.Command, "format")
    assert name in option_choices(bench_export.Command, "format")
    assert serializers.ExportRequestSerializer(data={"format": name}).is_valid()
    streamed = client.get(f"/api/exports/{name}.jsonl")
    assert streamed.status_code == 200 and streamed["Content-Type"].startswith("application/jsonl")


@pytest.mark.django_db
def test_bad_form_input_names_the_field_and_starts_nothing(client, admin_user):
    client.force_login(admin_user)
    page = client.post("/exports/", {"format": "prm800k", "generations": "1, two", "neutral_is_good": "1"})
    assert page.status_code == 200 and b"not a comma-separated list of integers" in page.content
    assert not ExportJob.objects.exists()


@pytest.mark.django_db
def test_nothing_is_offered_for_download_before_the_job_succeeded(client, admin_user):
    client.force_login(admin_user)
    job = ExportJob.objects.create(format="prm800k", state=JobState.RUNNING, total=10, done=4)
    partial = client.get(f"/jobs/export/{job.pk}/", headers={"HX-Request": "true"})
    assert b"<html" not in partial.content and b'value="40"' in partial.content
    assert b'data-state="running"' in partial.content and b"4 of 10 annotations" in partial.content
    assert b"Download" not in partial.content and b'hx-trigger="every 1s"' in partial.content
    assert client.get(f"/jobs/export/{job.pk}/download").status_code == 404


@pytest.mark.embedded
def test_an_export_started_from_the_page_runs_on_a_real_worker_and_is_downloadable(
    client, admin_user, celery_worker_process
):
    annotate(SolutionFactory(), [1, 1, 1], generation=3)
    annotate(SolutionFactory(), [1, 0, -1], generation=3)
    annotate(SolutionFactory(), [1, 1, 1], generation=4)
    client.force_login(admin_user)
    response = client.post("/exports/", {"format": "trl", "generations": "3", "neutral_is_good": "0"})
    job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/export/{job.pk}/"

    def finished_partial():
        page = client.get(f"/jobs/export/{job.pk}/", headers={"HX-Request": "true"})
        return page if b"Download" in page.content else None

    partial = wait_for(finished_partial, timeout=60)
    assert b"every 1s" not in partial.content  # polling stops once finished
    job.refresh_from_db()
    assert (job.state, job.lines, job.done, job.percent) == (JobState.SUCCEEDED, 3, 2, 100)
    download = client.get(f"/jobs/export/{job.pk}/download")
    rows = [json.loads(line) for line in b"".join(download.streaming_content).decode().splitlines()]
    # The step stopped at is a row; the walked path before it is another, as TRL's converter writes them.
    assert [row["labels"] for row in rows] == [[True, True, True], [True, False, False], [True, False]]
    assert download["Content-Disposition"].startswith('attachment; filename="stepwise-trl-')
    assert exporting.finished_file(job).name == f"export-{job.pk}-trl.jsonl"
