"""An annotation's `updated_at` (and every other auto_now field) is true after each way its labels
are written: the labeling path writes below the ORM (infra/statements.py), which sets them from
the model's fields, and retraining counts the labels changed since its last run by it."""
import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotate.labeling import actions, queueing, reviewing, timing
from annotate.labeling.timing import ActiveTime
from annotate.models import Annotation, LabelingConfig, Project
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]
LONG_AGO = timezone.now() - dt.timedelta(days=30)


@pytest.fixture
def task(annotator):
    SolutionFactory(steps=["one", "two", "three"])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def moves_updated_at(annotation, write) -> bool:
    """Whether `write()` leaves the annotation's updated_at after the time it started."""
    Annotation.objects.filter(pk=annotation.pk).update(updated_at=LONG_AGO)
    started = timezone.now()
    write()
    return Annotation.objects.get(pk=annotation.pk).updated_at >= started


def test_a_rating_moves_updated_at(task):
    assert moves_updated_at(task, lambda: actions.rate(annotation=task, index=0, rating=1))


def test_a_correction_and_a_flag_move_updated_at(task):
    actions.rate(annotation=task, index=0, rating=1)
    assert moves_updated_at(task, lambda: actions.rate(annotation=task, index=0, rating=0))
    assert moves_updated_at(task, lambda: actions.flag(annotation=task, index=0, flagged=True))


def test_an_undo_moves_updated_at(task):
    actions.rate(annotation=task, index=0, rating=1)
    assert moves_updated_at(task, lambda: actions.undo(annotation=task, index=0))


def test_a_written_step_moves_updated_at(task):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"allow_human_completion": True})
    actions.rate(annotation=task, index=0, rating=-1)
    assert moves_updated_at(task, lambda: actions.write_completion(annotation=task, index=0, text="Better."))


def test_a_time_report_moves_updated_at_and_an_empty_one_writes_nothing(task):
    assert moves_updated_at(task, lambda: timing.record_time(annotation=task, times=ActiveTime(5000, {0: 4000})))
    assert not moves_updated_at(task, lambda: timing.record_time(annotation=task, times=ActiveTime()))


def test_a_submit_moves_updated_at(task):
    actions.rate(annotation=task, index=0, rating=-1)
    assert moves_updated_at(task, lambda: actions.submit(annotation=task))


def test_a_submit_with_the_next_task_moves_updated_at(task, annotator):
    SolutionFactory(steps=["next"])
    queueing.ensure_default_queue()
    actions.rate(annotation=task, index=0, rating=-1)
    assert moves_updated_at(task, lambda: actions.submit_and_claim_next(annotator=annotator, annotation=task))


def test_a_rating_through_the_page_moves_updated_at(task, annotator):
    client = Client()
    client.force_login(annotator)
    url = reverse("annotate:label-rate", args=[task.pk])
    assert moves_updated_at(task, lambda: client.post(url, {"index": 0, "rating": 1}, HTTP_HX_REQUEST="true"))


@pytest.mark.parametrize("rating", [0, -1],
                         ids=["finish reason kept", "finish reason changed"])
def test_a_reviewer_override_moves_updated_at(task, reviewer, rating):
    for index in range(3):
        actions.rate(annotation=task, index=index, rating=1)
    actions.submit(annotation=task)
    task.refresh_from_db()
    assert moves_updated_at(task, lambda: reviewing.override_rating(
        annotation=task, index=1, rating=rating, reviewer=reviewer))
