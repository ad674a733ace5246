"""A step's rating has one owner, steps/ratings.py: what the values are, how a sent one is read,
what counts as an error or as good. Every consumer reads a rating the way it was written."""
import html
import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotate.labeling import actions, queueing, reviewing, verdicts
from annotate.labeling.refusals import LabelingError
from annotate.models import Completion, RatingOverride, Step
from annotate.pool import exporting
from annotate.templatetags import workspace
from scoring.core.training_data import step_counts
from scoring.rescoring import label_rows
from steps import ratings
from steps.arithmetic import first_error
from steps.ratings import InvalidRating, Rating
from tests.annotations import annotate
from tests.conftest import REPO_ROOT
from tests.factories import SolutionFactory


def test_the_ratings_are_prm800ks_three_values_worst_first():
    assert [int(r) for r in ratings.RATINGS] == [-1, 0, 1]
    assert ratings.CHOICES == [(-1, "wrong"), (0, "neutral"), (1, "good")]
    assert json.dumps([Rating.NEGATIVE, Rating.POSITIVE]) == "[-1, 1]"  # stored and sent as plain ints


@pytest.mark.parametrize("value", [2, -2, True, False, 1.0, "1", None])
def test_reading_anything_but_a_rating_names_it_and_what_is_allowed(value):
    with pytest.raises(InvalidRating, match=re.escape(f"must be one of -1, 0, 1, not {value!r}")):
        ratings.parse(value)
    assert not ratings.is_rating(value)


def test_a_rating_reads_back_as_itself():
    assert [ratings.parse(int(r)) for r in Rating] == list(Rating)
    assert ratings.parse_optional(None) is None and ratings.parse_optional(0) is Rating.NEUTRAL


def test_only_minus_one_is_an_error_and_neutral_is_good_only_when_asked():
    assert [r.is_error for r in Rating] == [True, False, False]
    assert [ratings.is_error(r) for r in (-1, 0, 1, None)] == [True, False, False, False]
    assert [ratings.is_good(r, neutral_is_good=True) for r in (-1, 0, 1, None)] == [False, True, True, False]
    assert [ratings.is_good(r, neutral_is_good=False) for r in (-1, 0, 1, None)] == [False, False, True, False]
    assert first_error([Rating.POSITIVE, None, Rating.NEUTRAL, Rating.NEGATIVE]) == 3


def test_the_models_choices_and_check_come_from_the_rating():
    for model, name in [(Completion, "rating"), (Step, "gold_rating"), (RatingOverride, "previous_rating"),
                        (RatingOverride, "new_rating")]:
        assert model._meta.get_field(name).choices == ratings.CHOICES
    (check,) = [c for c in Completion._meta.constraints if c.name == "rating_in_range"]
    assert ("rating__in", [-1, 0, 1]) in check.condition.children


@pytest.mark.django_db
@pytest.mark.parametrize("last", list(Rating))
def test_a_rating_round_trips_through_verdicts_export_and_training_data(last):
    solution = SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4."])
    annotation = annotate(solution, [Rating.POSITIVE, last])
    expected = (1, int(last))
    assert verdicts.verdicts(annotation).ratings == expected
    (line,) = exporting.iter_rows(format="prm800k", options=exporting.ExportOptions())
    assert tuple(step["completions"][0]["rating"] for step in line["label"]["steps"]) == expected
    (soft,) = exporting.iter_rows(format="soft", options=exporting.ExportOptions(neutral_is_good=False))
    assert soft["k"] == [1, int(last == Rating.POSITIVE)] and soft["n"] == [1, 1]
    assert label_rows.human_ratings(solution_ids=[solution.pk]) == {solution.pk: (expected,)}
    assert step_counts([expected], 2, neutral="negative") == ([1, int(last == Rating.POSITIVE)], [1, 1])


@pytest.mark.django_db
def test_labeling_and_review_refuse_what_is_not_a_rating_with_the_same_words(annotator, reviewer):
    SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4."])
    queueing.ensure_default_queue()
    task = queueing.claim_next(annotator=annotator)
    with pytest.raises(LabelingError, match="^rating must be one of -1, 0, 1, not 5$"):
        actions.rate(annotation=task, index=0, rating=5)
    actions.rate(annotation=task, index=0, rating=Rating.NEGATIVE)
    actions.submit(annotation=task)
    with pytest.raises(LabelingError, match="^rating must be one of -1, 0, 1, not 5$"):
        reviewing.override_rating(annotation=task, index=0, rating=5, reviewer=reviewer)
    assert not RatingOverride.objects.exists()


def test_the_labeling_page_offers_every_rating_once_with_its_own_keys():
    buttons = workspace.RATING_BUTTONS
    assert [b.rating for b in buttons] == list(Rating)
    keys = [key for b in buttons for key in b.keys]
    assert len(keys) == len(set(keys)) and json.loads(workspace.RATING_KEYS)["1"] == "-1"
    # The script holds no rating of its own: it reads them from the task's data attributes.
    script = (REPO_ROOT / "static" / "js" / "label.js").read_text()
    assert not re.search(r'"rate", "|"-1"|"\+1"', script)


@pytest.mark.django_db
def test_the_task_page_renders_the_ratings_the_script_reads(annotator):
    SolutionFactory(steps=["Let $x = 2$.", "So 2x = 4."])
    queueing.ensure_default_queue()
    client = Client()
    client.force_login(annotator)
    page = client.post(reverse("annotate:label-next")).content.decode()
    task = re.search(r'<section id="task"[^>]*>', page).group(0)
    attributes = dict(re.findall(r'data-([\w-]+)="([^"]*)"', task))
    assert json.loads(html.unescape(attributes["rating-keys"])) == json.loads(workspace.RATING_KEYS)
    assert json.loads(html.unescape(attributes["rating-signs"])) == {"-1": "−1", "0": "0", "1": "+1"}
    assert attributes["error-rating"] == "-1"
    for b in workspace.RATING_BUTTONS:
        assert f'value="{b.value}" aria-pressed="false"' in page
        assert f'aria-label="Step 1: {b.name} ({b.sign})" title="{b.sign}: {b.meaning} (key {b.keys[0]})"' in page
