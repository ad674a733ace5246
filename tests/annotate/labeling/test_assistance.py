"""Assisted labeling (annotate.labeling.assistance): what the page shows of the model's view in
each project mode, and what each rating keeps of it, through the task, the page and the export."""
import pytest
from django.test import Client
from django.urls import reverse

from annotate.labeling import actions as labeling
from annotate.labeling import queueing, tasks
from annotate.labeling.refusals import LabelingError
from annotate.models import LabelingConfig, Project, StepLabel
from annotate.pool import exporting
from annotate.pool.exporting.options import ExportOptions
from tests.factories import SolutionFactory, scored_by_current_model

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]
HTMX = {"HTTP_HX_REQUEST": "true"}
PROMPT = "look again?"


def _mode(assistance: str, margin: float = 0.5) -> None:
    LabelingConfig.objects.update_or_create(
        project=Project.objects.sole(), defaults={"assistance": assistance, "assistance_margin": margin})


@pytest.fixture
def task(annotator):
    solution = SolutionFactory(steps=["one", "two", "three"])
    # The current model doubts step 2.
    scored_by_current_model(solution, [0.9, 0.1, 0.8])
    queueing.ensure_default_queue()
    return queueing.claim_next(annotator=annotator)


def _seen(task) -> list:
    return list(StepLabel.objects.filter(annotation=task).order_by("index").values_list("assistance", flat=True))


def _prm800k_steps() -> list[dict]:
    (line,) = exporting.iter_rows(format="prm800k", options=ExportOptions())
    return line["label"]["steps"]


def test_blind_shows_nothing_and_stores_nothing(task, annotator):
    client = Client()
    client.force_login(annotator)
    answer = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    answer = client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 1, "rating": 1}, **HTMX)
    assert PROMPT not in answer.content.decode()
    assert "Model's guess" not in client.get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    view = tasks.task_view(task)
    assert view.suggestion is None and not any(step.second_look for step in view.steps)
    assert _seen(task) == [None, None, None]


def test_second_look_asks_once_when_the_model_disagrees_and_keeps_both_answers(task, annotator):
    _mode("second_look")
    client = Client()
    client.force_login(annotator)
    rate = reverse("annotate:label-rate", args=[task.pk])
    first = client.post(rate, {"index": 0, "rating": 1}, **HTMX).content.decode()
    assert PROMPT not in first  # the model agrees (0.9 against +1)
    asked = client.post(rate, {"index": 1, "rating": 1}, **HTMX).content.decode()
    assert asked.count(PROMPT) == 1 and "The model doubts this step" in asked
    view = tasks.task_view(task)
    assert view.steps[1].second_look and view.next_index == 1 and view.finish_reason is None
    with pytest.raises(LabelingError, match="the model doubts step 2"):
        labeling.rate(annotation=task, index=2, rating=1)  # answered first
    answered = client.post(rate, {"index": 1, "rating": -1}, **HTMX).content.decode()
    assert PROMPT not in answered
    labeling.rate(annotation=task, index=1, rating=1)  # asked once: a later change asks nothing
    assert not tasks.task_view(task).steps[1].second_look
    assert _seen(task)[:2] == [
        {"mode": "second_look", "model_p": 0.9, "shown": "none"},
        {"mode": "second_look", "model_p": 0.1, "shown": "second_look", "first_rating": 1, "final_rating": -1},
    ]


def test_a_second_look_waiting_for_its_answer_holds_the_submit(task):
    _mode("second_look")
    labeling.rate(annotation=task, index=0, rating=-1)  # the model says 0.9: it thinks the step is right
    view = tasks.task_view(task)
    assert view.steps[0].second_look and view.finish_reason is None
    with pytest.raises(LabelingError, match="the model doubts step 1"):
        labeling.submit(annotation=task)
    labeling.rate(annotation=task, index=0, rating=-1)  # looked again, kept
    assert labeling.submit(annotation=task) == "found_error"
    assert _prm800k_steps()[0]["assistance"] == {
        "mode": "second_look", "model_p": 0.9, "shown": "second_look", "first_rating": -1, "final_rating": -1}


def test_the_margin_decides_what_counts_as_disagreeing(task):
    _mode("second_look", margin=0.95)
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=1)  # 1 - 0.1 = 0.9: within the margin
    assert [seen["shown"] for seen in _seen(task)[:2]] == ["none", "none"]


def test_suggest_shows_the_models_first_error_guess_from_the_start(task, annotator):
    _mode("suggest")
    client = Client()
    client.force_login(annotator)
    page = client.get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    assert "Model's guess: the first error is step 2" in page
    assert tasks.task_view(task).suggestion.first_error == 1
    labeling.rate(annotation=task, index=0, rating=1)
    labeling.rate(annotation=task, index=1, rating=-1)
    labeling.submit(annotation=task)
    assert [step.get("assistance") for step in _prm800k_steps()] == [
        {"mode": "suggest", "model_p": 0.9, "shown": "suggestion", "model_first_error": 1},
        {"mode": "suggest", "model_p": 0.1, "shown": "suggestion", "model_first_error": 1},
    ]


def test_suggest_shows_no_guess_for_a_solution_the_model_has_not_scored(annotator):
    _mode("suggest")
    SolutionFactory(steps=["one", "two"])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    assert tasks.claimed_view(task).suggestion is None
    labeling.rate(annotation=task, index=0, rating=1)
    assert _seen(task)[0] == {"mode": "suggest", "model_p": None, "shown": "none"}


def test_a_blind_export_has_no_assistance_key(task):
    for index in range(3):
        labeling.rate(annotation=task, index=index, rating=1)
    labeling.submit(annotation=task)
    assert all("assistance" not in step for step in _prm800k_steps())
