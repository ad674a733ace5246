"""A rescore's progress in words: counts while it runs, "nothing to score" when there was nothing."""
import pytest
from django.urls import reverse

from annotate.models import Project
from jobs.states import JobState
from scoring.models import ModelVersion, RescoreJob
from scoring.store import registry


@pytest.fixture
def version(db):
    version = ModelVersion.objects.create(name="tiny-v", path="x", weights_sha256="0" * 64)
    registry.set_current_model(version, project=Project.objects.sole())
    return version


def progress(client, job) -> str:
    return client.get(reverse("scoring:rescore-job", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()


def test_a_rescore_with_nothing_to_score_says_so(client, reviewer, version):
    job = RescoreJob.objects.create(model_version=version, state=JobState.SUCCEEDED, generation=2)
    client.force_login(reviewer)
    page = progress(client, job)
    assert "Nothing to score: tiny-v had scored every solution in the pool already." in page
    assert "of ?" not in page and "0 of 0" not in page and "0/0 chunks" not in page


def test_a_rescore_waiting_for_the_worker_counts_without_a_question_mark(client, reviewer, version):
    job = RescoreJob.objects.create(model_version=version)
    client.force_login(reviewer)
    page = progress(client, job)
    assert "pending</strong> — 0 solutions so far" in page
    assert "of ?" not in page and "Nothing to score" not in page
    RescoreJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, total=64, done=0, chunks_total=1)
    assert "running</strong> — 0 of 64 solutions" in progress(client, job)
