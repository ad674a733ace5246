"""Labeling one solution: ratings in order, stop at first error, submit, time."""
import pytest
from django.test import Client
from django.urls import reverse

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, tasks, timing
from annotate.labeling.refusals import AlreadySubmitted, LabelingError, LeaseLost
from annotate.labeling.timing import ActiveTime
from annotate.models import Annotation, LabelingConfig, Project, QueueItem, StepLabel
from tests.factories import SolutionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def task(annotator):
    SolutionFactory(steps=["one", "two", "three", "four"])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def ratings(task):
    return [row.rating for row in tasks.task_view(task).steps]


def test_steps_are_rated_in_order(task):
    with pytest.raises(LabelingError, match="rate step 1 first"):
        labeling.rate(annotation=task, index=2, rating=1)
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=0)
    view = tasks.task_view(task)
    assert [row.state for row in view.steps] == ["rated", "rated", "current", "locked"]
    assert view.next_index == 2


def test_a_rating_can_be_corrected_in_place(task):
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=1)
    labeling.rate(annotation=task, index=0, rating=0)
    assert ratings(task) == [0, 1, None, None]


def test_repeating_a_post_changes_nothing(task):
    for _ in range(3):
        labeling.rate(annotation=task, index=0, rating=1)
        labeling.flag(annotation=task, index=0, flagged=True)
    view = tasks.task_view(task)
    assert ratings(task) == [1, None, None, None]
    assert view.steps[0].flagged and view.next_index == 1


def test_bad_ratings_and_steps_are_refused_with_a_clear_message(task):
    with pytest.raises(LabelingError, match="one of -1, 0, 1"):
        labeling.rate(annotation=task, index=0, rating=2)
    with pytest.raises(LabelingError, match="step 9 does not exist"):
        labeling.rate(annotation=task, index=8, rating=1)


def test_stop_at_first_error_submits_as_found_error_and_drops_later_steps(task):
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=-1)
    view = tasks.task_view(task)
    assert view.finish_reason == "found_error" and view.next_index is None
    assert [row.state for row in view.steps] == ["rated", "rated", "after_error", "after_error"]
    with pytest.raises(LabelingError, match="after the first error"):
        labeling.rate(annotation=task, index=2, rating=1)
    assert labeling.submit(annotation=task) == "found_error"
    labels = list(StepLabel.objects.filter(annotation=task).order_by("index"))
    assert [(label.index, label.chosen_completion) for label in labels] == [(0, 0), (1, None)]
    assert task.status == Annotation.Status.SUBMITTED


def test_without_stop_at_first_error_every_step_is_rated(task):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"stop_at_first_error": False})
    labeling.rate(annotation=task, index=0, rating=-1)
    with pytest.raises(LabelingError, match="step 2 is not rated yet"):
        labeling.submit(annotation=task)
    for index in (1, 2, 3):
        labeling.rate(annotation=task, index=index, rating=1)
    assert labeling.submit(annotation=task) == "found_error"
    assert StepLabel.objects.filter(annotation=task).count() == 4


def test_all_steps_good_finishes_as_solution(task):
    for index in range(4):
        labeling.rate(annotation=task, index=index, rating=1 if index % 2 else 0)
    assert labeling.submit(annotation=task) == "solution"
    assert list(StepLabel.objects.filter(annotation=task).values_list("chosen_completion", flat=True)) == [0] * 4


def test_submit_before_the_end_says_which_step_is_missing(task):
    labeling.rate(annotation=task, index=0, rating=1)
    with pytest.raises(LabelingError, match="step 2 is not rated yet"):
        labeling.submit(annotation=task)
    assert Annotation.objects.get(pk=task.pk).status == Annotation.Status.IN_PROGRESS


@pytest.mark.parametrize("reason", ["give_up", "bad_problem"])
def test_give_up_and_bad_problem_need_a_reason(task, reason):
    labeling.rate(annotation=task, index=0, rating=1)
    with pytest.raises(LabelingError, match="note"):
        labeling.submit(annotation=task, finish_reason=reason, note="  ")
    assert labeling.submit(annotation=task, finish_reason=reason, note="too hard") == reason
    task.refresh_from_db()
    assert task.finish_note == "too hard"
    assert StepLabel.objects.filter(annotation=task).count() == 1


def test_every_change_after_submit_is_refused(task):
    labeling.rate(annotation=task, index=0, rating=-1)
    labeling.submit(annotation=task)
    for action in (
        lambda: labeling.rate(annotation=task, index=0, rating=1),
        lambda: labeling.flag(annotation=task, index=0, flagged=True),
        lambda: labeling.undo(annotation=task, index=0),
        lambda: labeling.submit(annotation=task),
    ):
        with pytest.raises(AlreadySubmitted):
            action()
    assert ratings(task) == [-1]


def test_undo_clears_only_the_last_rated_step(task):
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=0)
    with pytest.raises(LabelingError, match="only the last rated step"):
        labeling.undo(annotation=task, index=0)
    labeling.undo(annotation=task, index=1)
    labeling.undo(annotation=task, index=1)
    assert ratings(task) == [1, None, None, None]


def test_human_completion_after_a_wrong_step_when_the_project_allows_it(task):
    labeling.rate(annotation=task, index=0, rating=-1)
    with pytest.raises(LabelingError, match="does not collect"):
        labeling.write_completion(annotation=task, index=0, text="Better step.")
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"allow_human_completion": True})
    labeling.write_completion(annotation=task, index=0, text="Better step.")
    label = StepLabel.objects.get(annotation=task, index=0)
    assert label.human_completion["text"] == "Better step."
    labeling.submit(annotation=task)
    assert StepLabel.objects.get(annotation=task, index=0).human_completion["source"] == "human"


def test_correcting_a_wrong_step_drops_its_rewrite(task):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"allow_human_completion": True})
    labeling.rate(annotation=task, index=0, rating=-1)
    labeling.write_completion(annotation=task, index=0, text="Better step.")
    labeling.rate(annotation=task, index=0, rating=1)
    assert StepLabel.objects.get(annotation=task, index=0).human_completion is None
    with pytest.raises(LabelingError, match="not rated -1"):
        labeling.write_completion(annotation=task, index=0, text="Better step.")


def test_active_time_only_grows_and_is_kept_per_step(task):
    labeling.rate(annotation=task, index=0, rating=1, times=ActiveTime(total_ms=4000, steps={0: 3500}))
    labeling.rate(annotation=task, index=0, rating=1, times=ActiveTime(total_ms=3000, steps={0: 1000}))
    timing.record_time(annotation=task, times=ActiveTime(total_ms=6000, steps={1: 1500}))
    labeling.rate(annotation=task, index=1, rating=-1)
    labeling.submit(annotation=task, times=ActiveTime(total_ms=6500, steps={1: 2000}))
    task.refresh_from_db()
    assert task.total_time_ms == 6500
    assert list(StepLabel.objects.filter(annotation=task).values_list("time_ms", flat=True)) == [3500, 2000]


def test_reported_time_cannot_exceed_the_wall_clock(task):
    timing.record_time(annotation=task, times=ActiveTime(total_ms=10**9))
    task.refresh_from_db()
    assert task.total_time_ms < 10**9


def test_parse_times_names_the_bad_field():
    assert timing.parse_times({"total_ms": "120", "step_ms": "0:100,1:20"}) == ActiveTime(120, {0: 100, 1: 20})
    assert timing.parse_times({}) is None
    with pytest.raises(LabelingError, match="step_ms"):
        timing.parse_times({"total_ms": "12", "step_ms": "x"})


def test_a_task_whose_lease_went_to_someone_else_cannot_be_changed(task, django_user_model):
    other = django_user_model.objects.create(username="other")
    QueueItem.objects.filter(pk=task.queue_item_id).update(status="leased", leased_to=other)
    with pytest.raises(LeaseLost):
        labeling.rate(annotation=task, index=0, rating=1)


def test_a_submit_is_announced_on_the_next_task_page(task, annotator):
    SolutionFactory(problem=task.solution.problem, steps=["one", "two"])  # the same problem comes next
    queueing.ensure_default_queue()
    client = Client()
    client.force_login(annotator)
    for index in range(4):
        labeling.rate(annotation=task, index=index, rating=1)
    page = client.post(reverse("annotate:label-submit", args=[task.pk]), follow=True)
    assert page.status_code == 200 and page.resolver_match.url_name in ("label-task", "label-start")
    assert '<li class="toast success">Submitted as solution.</li>' in page.content.decode()
