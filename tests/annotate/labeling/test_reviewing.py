"""The reviewer's page: what the annotator said (flags, notes, rewrites) and overrides that keep an
annotation consistent: the finish reason follows the ratings, and a state they cannot explain
is refused, never saved."""
import json

import pytest

from annotate.labeling import actions as labeling
from annotate.labeling import reviewing, verdicts
from annotate.models import Annotation, Completion, RatingOverride
from annotate.pool import exporting
from tests.annotations import annotate
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture
def annotator_user():
    return user_with_role("ann", "annotator")


def rate_all(annotator, steps: list[str], ratings: list[int], finish_reason: str) -> Annotation:
    """An annotation with every step rated (labeling without stop-at-first-error)."""
    annotation = annotate(SolutionFactory(steps=steps), [1] * len(steps), annotator=annotator,
                          finish_reason=finish_reason)
    for index, rating in enumerate(ratings):
        Completion.objects.filter(step_label__annotation=annotation, step_label__index=index).update(rating=rating)
    return annotation


def test_the_review_page_shows_the_annotators_flags_note_and_rewrite(client, reviewer, annotator_user):
    annotation = annotate(SolutionFactory(steps=["Let x = 2.", "Then x + x = 5."]), [1, -1], annotator=annotator_user,
                          finish_reason="give_up")
    Annotation.objects.filter(pk=annotation.pk).update(finish_note="the units are ambiguous")
    Completion.objects.filter(step_label__annotation=annotation, step_label__index=0).update(flagged=True)
    annotation.step_labels.filter(index=1).update(human_completion={"text": "Then x + x = 4.", "rating": None})
    client.force_login(reviewer)
    page = client.get(f"/review/{annotation.pk}/").content.decode()
    assert "the units are ambiguous" in page
    assert "Flagged “cannot judge”:</strong> step 1" in page and "⚑ cannot judge" in page
    assert "wrote instead" in page and "Then x + x = 4." in page
    # The table rates the pool's own steps: the rewritten step shows its -1.
    (row0, row1) = reviewing.review_rows(annotation=annotation, others=[])
    assert (row0.cells[0].flagged, row1.ratings, row1.cells[0].written_instead) == (True, [-1], "Then x + x = 4.")


def test_an_override_that_leaves_found_error_without_a_wrong_step_is_refused_and_says_why(
    client, reviewer, annotator_user
):
    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, -1], annotator=annotator_user)
    with pytest.raises(labeling.LabelingError, match="neither found_error nor a finished solution"):
        reviewing.override_rating(annotation=annotation, index=1, rating=0, reviewer=reviewer)
    # Nothing was saved.
    assert verdicts.verdicts(annotation).pool_ratings == (1, -1, None) and not RatingOverride.objects.exists()
    client.force_login(reviewer)
    page = client.post(f"/review/{annotation.pk}/override", {"index": "1", "rating": "0"}, follow=True)
    assert "neither found_error nor a finished solution" in page.content.decode()
    annotation.refresh_from_db()
    assert annotation.finish_reason == "found_error" and not RatingOverride.objects.exists()


def test_an_override_rederives_the_finish_reason_both_ways(reviewer, annotator_user):
    annotation = rate_all(annotator_user, ["a", "b", "c"], [1, -1, 1], "found_error")
    override = reviewing.override_rating(annotation=annotation, index=1, rating=0, reviewer=reviewer, note="fine")
    annotation.refresh_from_db()
    assert annotation.finish_reason == "solution" and override.note == "fine (finish reason found_error → solution)"
    assert [row["label"] for row in exporting.iter_rows(format="processbench", options=exporting.ExportOptions())] \
        == [-1]
    reviewing.override_rating(annotation=annotation, index=2, rating=-1, reviewer=reviewer)
    annotation.refresh_from_db()
    assert annotation.finish_reason == "found_error"
    assert [row["label"] for row in exporting.iter_rows(format="processbench", options=exporting.ExportOptions())] \
        == [2]


def test_an_override_of_a_rewritten_step_changes_the_pool_steps_rating(reviewer, annotator_user):
    annotation = annotate(SolutionFactory(steps=["a", "b"]), [1, -1], annotator=annotator_user)
    annotation.step_labels.filter(index=1).update(human_completion={"text": "B instead.", "rating": None})
    reviewing.override_rating(annotation=annotation, index=1, rating=0, reviewer=reviewer)
    verdict = verdicts.verdicts(annotation)
    assert verdict.pool_ratings == (1, 0) and verdict.ratings == (1, 1)  # the rewrite stays the annotator's +1
    annotation.refresh_from_db()
    assert annotation.finish_reason == "solution"
    assert RatingOverride.objects.get().completion.index == 0


def test_give_up_stands_whatever_the_override(reviewer, annotator_user):
    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 1], annotator=annotator_user,
                          finish_reason="give_up")
    reviewing.override_rating(annotation=annotation, index=1, rating=-1, reviewer=reviewer)
    annotation.refresh_from_db()
    assert annotation.finish_reason == "give_up"


def test_every_step_rated_good_on_an_answer_graded_wrong_goes_to_review_with_that_reason(reviewer, annotator_user):
    contradicted = annotate(SolutionFactory(steps=["a", "b"], is_correct=False), [1, 0], annotator=annotator_user)
    right = annotate(SolutionFactory(steps=["a", "b"], is_correct=True), [1, 1], annotator=annotator_user)
    found = annotate(SolutionFactory(steps=["a", "b"], is_correct=False), [1, -1], annotator=annotator_user)
    assert list(reviewing.annotations_for_review(contradiction=True)) == [contradicted]
    assert reviewing.review_reasons(contradicted) == ["answer_contradicts_labels"]
    assert reviewing.REVIEW_REASONS["answer_contradicts_labels"] == verdicts.verdicts(contradicted).contradicts_grade(
        "solution", False)
    assert reviewing.review_reasons(right) == reviewing.review_reasons(found) == []
    # The reviewer finds the error the annotator missed: the labels and the grade agree now.
    reviewing.override_rating(annotation=contradicted, index=1, rating=-1, reviewer=reviewer)
    assert not reviewing.annotations_for_review(contradiction=True).exists()


def test_the_review_pages_filter_by_and_state_the_contradiction(reviewer, annotator_user):
    from django.test import Client
    from django.urls import reverse

    contradicted = annotate(SolutionFactory(steps=["a", "b"], is_correct=False), [1, 0], annotator=annotator_user)
    right = annotate(SolutionFactory(steps=["a", "b"], is_correct=True), [1, 1], annotator=annotator_user)
    client = Client()
    client.force_login(reviewer)
    listed = client.get(reverse("annotate:review-list"), {"contradiction": "1"}).content.decode()
    assert reverse("annotate:review-detail", args=[contradicted.pk]) in listed
    assert reverse("annotate:review-detail", args=[right.pk]) not in listed
    detail = client.get(reverse("annotate:review-detail", args=[contradicted.pk])).content.decode()
    assert "Before review: " + reviewing.REVIEW_REASONS["answer_contradicts_labels"] in detail
    assert "Before review" not in client.get(reverse("annotate:review-detail", args=[right.pk])).content.decode()


SIX_STEPS = ["Let x = 2.", "Then 2x = 4.", "So 2x + 1 = 5.", "Then 3(2x + 1) = 16.", "So the total is 16.",
             "# Answer\n\n16"]


def exported(tmp_path, format: str) -> list[dict]:
    """The lines of an export file, written by the export command and read back."""
    from django.core.management import call_command

    out = tmp_path / f"{format}.jsonl"
    call_command("export_prm800k", str(out), "--format", format)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_reviewers_minus_one_ends_every_export_at_that_step_and_undoing_it_brings_the_rest_back(
        client, reviewer, annotator_user, tmp_path):
    """Stop at the first error (the default): the +1s rated after a step a reviewer rejects are no labels."""
    from annotate.labeling import queueing
    from annotate.pool import prm800k

    SolutionFactory(steps=SIX_STEPS, is_correct=False)
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator_user)
    for index in range(len(SIX_STEPS)):
        labeling.rate(annotation=task, index=index, rating=1)
    assert labeling.submit(annotation=task) == "solution"

    client.force_login(reviewer)
    client.post(f"/review/{task.pk}/override", {"index": 3, "rating": -1, "note": "3 * 5 is 15"})
    assert Annotation.objects.get(pk=task.pk).finish_reason == "found_error"

    (line,) = exported(tmp_path, "prm800k")
    prm800k.parse_line(line, 1)  # the schema's own validator
    steps = line["label"]["steps"]
    assert [[c["rating"] for c in step["completions"]] for step in steps] == [[1], [1], [1], [-1]]
    assert [step["chosen_completion"] for step in steps] == [0, 0, 0, None]  # PRM800K's found_error shape
    assert line["label"]["finish_reason"] == "found_error"
    # TRL's converter's rows of a task ended at step 4: the rejected step, and the path before it.
    assert [row["labels"] for row in exported(tmp_path, "trl")] == [[True, True, True, False], [True] * 3]
    (processbench,) = exported(tmp_path, "processbench")
    assert processbench["label"] == 3
    assert verdicts.verdicts(Annotation.objects.get(pk=task.pk)).pool_ratings == (1, 1, 1, -1, None, None)

    # Undone: the annotator's own ratings after the step are labels again.
    client.post(f"/review/{task.pk}/override", {"index": 3, "rating": 1, "note": "no, 16 is right"})
    assert Annotation.objects.get(pk=task.pk).finish_reason == "solution"
    (line,) = exported(tmp_path, "prm800k")
    assert [step["completions"][0]["rating"] for step in line["label"]["steps"]] == [1] * 6
    assert [step["chosen_completion"] for step in line["label"]["steps"]] == [0] * 6


def test_where_annotators_rate_every_step_a_reviewers_minus_one_keeps_the_ratings_after_it(
        reviewer, annotator_user, tmp_path):
    """The project asked for every step rated: the line goes on from the -1, and says so (chosen 0)."""
    from annotate.labeling import queueing
    from annotate.models import LabelingConfig, Project

    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"stop_at_first_error": False})
    SolutionFactory(steps=SIX_STEPS, is_correct=False)
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator_user)
    for index in range(len(SIX_STEPS)):
        labeling.rate(annotation=task, index=index, rating=1)
    labeling.submit(annotation=task)
    reviewing.override_rating(annotation=task, index=3, rating=-1, reviewer=reviewer)
    (line,) = exported(tmp_path, "prm800k")
    assert [step["completions"][0]["rating"] for step in line["label"]["steps"]] == [1, 1, 1, -1, 1, 1]
    assert [step["chosen_completion"] for step in line["label"]["steps"]] == [0] * 6
    (trl,) = exported(tmp_path, "trl")
    assert trl["labels"] == [True, True, True, False]
