"""The one job lifecycle (jobs.models): who holds a running job or chunk, when it may be taken
over, how it ends, and the registry of job kinds that recovery walks."""
import datetime as dt

import pytest
from django.apps import apps
from django.db import models
from django.test.utils import isolate_apps
from django.utils import timezone

from annotate.models import ExportJob, ImportJob
from jobs import models as job_models
from jobs import recovery
from jobs.holders import heartbeats, this_worker
from jobs.models import Job, claim
from jobs.states import JobState
from tests.conftest import REPO_ROOT
from tests.jobs.test_recovery import ALIVE, DEAD, lose_broker_messages, running

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    lose_broker_messages()  # the reconciler's messages: no worker here to run them


def test_starting_a_pending_job_records_this_process_as_its_holder(tmp_path):
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert job.start()
    job.refresh_from_db()
    assert (job.state, job.claimed_by) == (JobState.RUNNING, this_worker())
    assert timezone.now() - job.heartbeat_at < dt.timedelta(seconds=5)


def test_a_running_job_is_taken_over_only_once_its_holder_is_gone(tmp_path, settings):
    settings.STEPWISE_JOB_STALE_SECONDS = 30
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    running(job, holder=ALIVE, beat_seconds_ago=5)
    assert not ImportJob.objects.get(pk=job.pk).start()  # alive and beating: never twice at once
    running(job, holder=ALIVE, beat_seconds_ago=60)
    assert ImportJob.objects.get(pk=job.pk).start()  # silent for too long
    running(job, holder=DEAD, beat_seconds_ago=1)
    taken = ImportJob.objects.get(pk=job.pk)
    assert taken.start() and ImportJob.objects.get(pk=job.pk).claimed_by == this_worker()  # dead at once


def test_a_cancelled_job_cannot_succeed_or_fail_afterwards(tmp_path):
    job = ExportJob.objects.create()
    assert job.start() and job.cancel("cancelled by boss")
    assert not job.succeed() and not job.fail("late")
    job.refresh_from_db()
    assert (job.state, job.error, job.is_finished) == (JobState.CANCELLED, "cancelled by boss", True)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_lost_database_connection_gives_the_job_back_for_its_task_to_retry(tmp_path):
    from django.db import OperationalError, connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    job = ImportJob.objects.create(path=str(tmp_path / "x.jsonl"))
    assert job.start()
    with pytest.raises(OperationalError), job.failure_recorded():
        connection.connection.close()  # what pg_terminate_backend leaves behind
        raise OperationalError("server closed the connection unexpectedly")
    job.refresh_from_db()  # on a new connection
    assert (job.state, job.claimed_by, job.error) == (JobState.PENDING, "", "")

    assert job.start()
    with pytest.raises(ValueError), job.failure_recorded():  # a fault of the job itself still fails it
        raise ValueError("line 3: no steps")
    job.refresh_from_db()
    assert (job.state, job.error) == (JobState.FAILED, "ValueError: line 3: no steps")




def a_rescore_chunk():
    from scoring.models import ModelVersion, RescoreChunk, RescoreJob

    version = ModelVersion.objects.create(name="tiny", path="/nowhere", weights_sha256="0" * 64)
    return RescoreChunk.objects.create(job=RescoreJob.objects.create(model_version=version), index=0, solution_ids=[])


def test_a_chunk_held_by_a_live_worker_is_left_to_it_and_a_dead_holders_chunk_is_taken_over():
    from scoring.models import RescoreChunk

    chunk = a_rescore_chunk()
    RescoreChunk.objects.filter(pk=chunk.pk).update(
        state=RescoreChunk.State.RUNNING, claimed_by="gpu-7:4242", heartbeat_at=timezone.now()
    )
    assert not chunk.claim()  # another host's worker, beating: its chunk

    RescoreChunk.objects.filter(pk=chunk.pk).update(claimed_by=DEAD)
    assert chunk.claim()
    chunk.refresh_from_db()
    assert (chunk.state, chunk.claimed_by) == (RescoreChunk.State.RUNNING, this_worker())

    # While held, the chunk is beaten like a job, so a live holder's chunk never looks stale.
    long_ago = timezone.now() - dt.timedelta(hours=1)
    RescoreChunk.objects.filter(pk=chunk.pk).update(heartbeat_at=long_ago)
    heartbeats.beat()
    assert RescoreChunk.objects.get(pk=chunk.pk).heartbeat_at > long_ago
    heartbeats.release(chunk)


def test_a_pending_chunk_is_claimed_once_whichever_state_the_claim_moves_it_to():
    from scoring.models import GenerationChunk, GenerationRun, RescoreChunk

    rescore = RescoreChunk.objects.filter(pk=a_rescore_chunk().pk)
    assert claim(rescore, to=RescoreChunk.State.RUNNING, claimed_by=ALIVE)
    assert not claim(rescore, to=RescoreChunk.State.RUNNING, claimed_by=this_worker())  # taken: the first keeps it
    assert rescore.get().claimed_by == ALIVE

    run = GenerationRun.objects.create(generator_spec={"backend": "none"}, prompt_template="{problem}")
    generation = GenerationChunk.objects.filter(pk=GenerationChunk.objects.create(run=run, index=0).pk)
    assert claim(generation, to=GenerationChunk.State.DONE)
    assert not claim(generation, to=GenerationChunk.State.DONE)  # a second attempt writes nothing
    assert generation.get().state == GenerationChunk.State.DONE


def test_every_concrete_job_model_of_both_apps_is_a_registered_job_kind():
    concrete = {model for model in apps.get_models() if issubclass(model, Job)}
    assert {model._meta.label for model in concrete} >= {
        "annotate.ImportJob", "annotate.ExportJob", "scoring.RescoreJob", "scoring.TrainingRun",
        "scoring.GenerationRun", "scoring.RolloutLabelJob"}
    assert set(job_models.job_kinds()) == concrete


def test_a_new_job_kind_registers_itself_by_being_defined(monkeypatch):
    monkeypatch.setattr(job_models, "_kinds", dict(job_models._kinds))  # the new kind leaves with the test

    with isolate_apps("annotate"):
        class Sketch(Job):
            class Meta:
                abstract = True

        class Render(Sketch):
            pages = models.PositiveIntegerField(default=0)
            task_name = "annotate.render_task"

            class Meta:
                app_label = "annotate"

    kinds = job_models.job_kinds()
    assert Render in kinds and Sketch not in kinds  # an abstract kind has no rows to recover


def test_the_reconciler_reaches_a_scoring_job_kind_that_annotate_never_names():
    from scoring.models import GenerationRun

    run = GenerationRun.objects.create(generator_spec={"backend": "none"}, prompt_template="{problem}")
    assert f"GenerationRun:{run.pk}" in recovery.reconcile(pending_after=0)

    # Not even as a string (an app registry lookup by name): the kinds reach recovery by registering.
    scoring_kinds = [kind.__name__ for kind in job_models.job_kinds() if kind._meta.app_label == "scoring"]
    sources = [path for path in (REPO_ROOT / "annotate").rglob("*.py") if "migrations" not in path.parts]
    named = [(path.name, kind) for path in sources for kind in scoring_kinds if kind in path.read_text()]
    assert len(scoring_kinds) >= 4 and named == []
