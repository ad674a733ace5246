"""Assisted labeling (annotate.labeling.assistance): what the page shows of the model's view in
each project mode, and what each rating keeps of it, through the task, the page and the export."""
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate.labeling import actions as labeling
from annotate.labeling import assistance, queueing, tasks
from annotate.labeling.refusals import LabelingError
from annotate.models import AutoLabelRun, AutoStepLabel, LabelingConfig, Project, StepLabel
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


def _signed_in(annotator) -> Client:
    client = Client()
    client.force_login(annotator)
    return client


def judged(solution, ps, critiques):
    """A verifier model's run on the solution: each step's P(good) and critique."""
    run = AutoLabelRun.objects.create(method=AutoLabelRun.Method.JUDGE, source="tiny-judge")
    AutoStepLabel.objects.bulk_create(AutoStepLabel(run=run, step=step, soft=p, critique=critique)
                                      for step, p, critique in zip(solution.steps.order_by("index"), ps, critiques))


@pytest.fixture
def judged_task(task):
    # The judge calls step 2 bad, as the model does, and step 3 bad, which the model calls good.
    judged(task.solution, [0.95, 0.2, 0.1], ["Fine.", "2 + 2 is 4, <b>not</b> 5.", "The sign flips."])
    return task


def test_second_look_shows_the_judges_critique_beside_the_models_doubt_and_keeps_it(judged_task, annotator):
    _mode("second_look")
    client = _signed_in(annotator)
    rate = reverse("annotate:label-rate", args=[judged_task.pk])
    first = client.post(rate, {"index": 0, "rating": 1}, **HTMX).content.decode()
    assert "judge:" not in first  # the judge agrees: nothing of it is shown
    asked = client.post(rate, {"index": 1, "rating": 1}, **HTMX).content.decode()
    assert "The model doubts this step (model: p=0.10)" in asked
    # The critique is text, escaped, never markup.
    assert "judge: bad, p=0.20 — 2 + 2 is 4, &lt;b&gt;not&lt;/b&gt; 5." in asked and "<b>not</b>" not in asked
    page = client.get(reverse("annotate:label-task", args=[judged_task.pk])).content.decode()
    assert "judge: bad, p=0.20" in page  # still asked after a reload
    answered = client.post(rate, {"index": 1, "rating": -1}, **HTMX).content.decode()
    assert "judge:" not in answered
    assert _seen(judged_task)[:2] == [
        {"mode": "second_look", "model_p": 0.9, "shown": "none",
         "judge_good": True, "judge_p": 0.95, "judge_critique_shown": False},
        {"mode": "second_look", "model_p": 0.1, "shown": "second_look", "first_rating": 1, "final_rating": -1,
         "judge_good": False, "judge_p": 0.2, "judge_critique_shown": True,
         "judge_critique": "2 + 2 is 4, <b>not</b> 5."},
    ]


def test_the_judge_alone_disagreeing_asks_for_a_second_look(task, annotator):
    _mode("second_look")
    judged(task.solution, [0.3, 0.2, 0.9], ["Divides by x, which may be 0.", "Wrong sum.", ""])
    labeling.rate(annotation=task, index=0, rating=1)  # the model agrees (0.9); the judge does not
    view = tasks.task_view(task)
    assert view.steps[0].second_look and view.next_index == 0
    assert view.steps[0].look_again == assistance.SecondLook(
        model_p=0.9, model_doubts=False, judge_good=False, judge_p=0.3, critique="Divides by x, which may be 0.")
    client = _signed_in(annotator)
    page = client.get(reverse("annotate:label-task", args=[task.pk])).content.decode()
    assert "The judge disagrees with your rating (model: p=0.90) — look again?" in page
    assert "judge: bad, p=0.30 — Divides by x, which may be 0." in page
    labeling.rate(annotation=task, index=0, rating=1)  # looked again, kept
    labeling.rate(annotation=task, index=1, rating=-1)  # all three agree: wrong, nothing asked
    assert labeling.submit(annotation=task) == "found_error"
    assert [step["assistance"] for step in _prm800k_steps()] == [
        {"mode": "second_look", "model_p": 0.9, "shown": "second_look", "first_rating": 1, "final_rating": 1,
         "judge_good": False, "judge_p": 0.3, "judge_critique_shown": True,
         "judge_critique": "Divides by x, which may be 0."},
        {"mode": "second_look", "model_p": 0.1, "shown": "none",
         "judge_good": False, "judge_p": 0.2, "judge_critique_shown": False},
    ]


def test_the_latest_judge_run_is_the_one_shown(judged_task):
    _mode("second_look")
    judged(judged_task.solution, [0.9, 0.9, 0.9], ["ok", "ok", "ok"])  # a later run changes its mind
    labeling.rate(annotation=judged_task, index=0, rating=-1)
    (seen, *_) = _seen(judged_task)
    assert (seen["judge_good"], seen["judge_p"], seen["judge_critique"]) == (True, 0.9, "ok")


@pytest.mark.parametrize("mode", ["blind", "suggest"])
def test_blind_and_suggest_never_read_or_show_the_judge(judged_task, annotator, mode):
    _mode(mode)
    client = _signed_in(annotator)
    rate = reverse("annotate:label-rate", args=[judged_task.pk])
    answers = [client.post(rate, {"index": i, "rating": 1}, **HTMX).content.decode() for i in range(3)]
    assert not any("judge" in answer or PROMPT in answer for answer in answers)
    assert not any(seen and any(key.startswith("judge") for key in seen) for seen in _seen(judged_task))


def _rating_statements(client, task, index, *, reads_only: bool = False) -> int:
    with CaptureQueriesContext(connection) as queries:
        client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": index, "rating": 1}, **HTMX)
    return sum(1 for query in queries if not reads_only or query["sql"].lstrip().upper().startswith("SELECT"))


def test_the_judge_costs_a_second_look_rating_one_statement_and_other_modes_none(task, annotator):
    """Measured against the same ratings without any judge run: blind and suggest read nothing
    more, second look one indexed read of the step's latest judge label. Reads are counted: where
    a rating's writes go one by one (SQLite), second look also writes its record apart."""
    client = _signed_in(annotator)
    _mode("suggest")
    client.post(reverse("annotate:label-rate", args=[task.pk]), {"index": 0, "rating": 1}, **HTMX)
    without = {mode: (_mode(mode), _rating_statements(client, task, 0))[1] for mode in ("blind", "suggest")}
    _mode("suggest")  # a settings change: each measured rating reads them afresh
    suggest_reads = _rating_statements(client, task, 0, reads_only=True)
    judged(task.solution, [0.9, 0.9, 0.9], ["", "", ""])
    assert {mode: (_mode(mode), _rating_statements(client, task, 0))[1] for mode in ("blind", "suggest")} == without
    _mode("second_look")
    assert _rating_statements(client, task, 0, reads_only=True) == suggest_reads + 1
