"""The start script's rescore: queued once per model, and never over a cancel."""
from annotate.models import Project
from jobs.states import JobState
from scoring.models import ModelVersion, RescoreJob
from scoring.rescoring import rescore
from scoring.store import registry


def current_version(name: str, project: Project) -> ModelVersion:
    version = ModelVersion.objects.create(name=name, path="x", weights_sha256="0" * 64)
    registry.set_current_model(version, project=project)
    return version


def test_a_start_queues_a_rescore_of_the_current_model_once(db):
    project = Project.objects.sole()
    assert rescore.rescore_at_start(project=project) is None  # no current model: nothing to score with
    version = current_version("v1", project)
    job = rescore.rescore_at_start(project=project)
    assert (job.model_version, job.state) == (version, JobState.PENDING)
    # A second start while it waits or runs is the same job, not another.
    assert rescore.rescore_at_start(project=project) == job
    RescoreJob.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    assert rescore.rescore_at_start(project=project) != job  # finished: a new one scores what is new


def test_a_cancelled_rescore_stays_cancelled_across_restarts_until_someone_starts_one(db, admin_user):
    project = Project.objects.sole()
    version = current_version("v1", project)
    job = rescore.rescore_at_start(project=project)
    assert rescore.cancel_rescore(job=job, user=admin_user)
    assert rescore.rescore_at_start(project=project) is None
    assert rescore.rescore_at_start(project=project) is None
    assert RescoreJob.objects.count() == 1
    started = rescore.start_rescore(model_version=version, project=project)  # as the models page does
    assert rescore.rescore_at_start(project=project) == started


def test_a_new_current_model_gets_its_own_rescore(db):
    project = Project.objects.sole()
    current_version("v1", project)
    first = rescore.rescore_at_start(project=project)
    second_version = current_version("v2", project)
    second = rescore.rescore_at_start(project=project)
    assert second != first and second.model_version == second_version
