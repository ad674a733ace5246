"""A pending job says what it waits behind: the jobs ahead of it on its own worker's queue."""
import pytest
from django.urls import reverse

from annotate.models import ExportJob, ImportJob, Project
from jobs import queues
from jobs.states import JobState
from scoring.models import ModelVersion, RescoreJob

pytestmark = pytest.mark.django_db


def test_each_kind_goes_to_the_queue_celery_routes_its_task_to():
    assert queues.queue_of(ExportJob) == queues.queue_of(ImportJob) == "default"
    assert queues.queue_of(RescoreJob) == "ml"


def test_a_pending_export_waits_behind_its_own_queue_only():
    version = ModelVersion.objects.create(name="v", path="x", weights_sha256="0" * 64)
    RescoreJob.objects.create(model_version=version, state=JobState.RUNNING)  # the ml worker's
    running_import = ImportJob.objects.create(path="a.jsonl", state=JobState.RUNNING)
    earlier_export = ExportJob.objects.create()
    export = ExportJob.objects.create()
    later_export = ExportJob.objects.create()
    assert queues.ahead_of(export) == [running_import, earlier_export]
    assert queues.waiting_line(export) == (
        f"Waits for the default worker, behind import job {running_import.pk} (running), "
        f"export job {earlier_export.pk} (pending).")
    assert queues.ahead_of(later_export)[-1] == export
    ImportJob.objects.filter(pk=running_import.pk).update(state=JobState.SUCCEEDED)
    ExportJob.objects.filter(pk=earlier_export.pk).update(state=JobState.CANCELLED)
    assert queues.waiting_line(export) == ""
    export.state = JobState.RUNNING
    assert queues.ahead_of(export) == []  # a running job waits for nothing


def test_another_projects_jobs_are_counted_not_named():
    other = Project.objects.create(slug="other", name="Other")
    ImportJob.objects.create(path="a.jsonl", state=JobState.RUNNING, project=other)
    export = ExportJob.objects.create(project=Project.objects.get(slug="default"))
    assert queues.waiting_line(export) == "Waits for the default worker, behind 1 job of other projects."


def test_the_export_page_says_what_a_pending_export_waits_behind(client, admin_user):
    running_import = ImportJob.objects.create(path="a.jsonl", state=JobState.RUNNING)
    export = ExportJob.objects.create()
    client.force_login(admin_user)
    page = client.get(reverse("annotate:export-detail", args=[export.pk])).content.decode()
    assert f"behind import job {running_import.pk} (running)" in page
