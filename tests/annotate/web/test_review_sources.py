"""Every source's word on each step, side by side: on the review page and through the API.

People (the majority of submitted labels), rollouts (K of N), a judge (verdict, p and critique)
and the current PRM (p) are read by annotate.labeling.sources, so both show the same thing.
"""
import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotate.labeling import roles
from annotate.models import Project
from tests.annotations import annotate
from tests.factories import SolutionFactory, user_with_role
from tests.sources_fixtures import judge_labels, prm_scores, rollout_labels

LONG_CRITIQUE = "The sum of 2 and 2 is 4, so claiming 5 is an arithmetic slip; " * 5


@pytest.fixture
def solution_with_every_source(db):
    solution = SolutionFactory(steps=["Add 2 and 2.", "So it is 5.", "# Answer\n\n5"], is_correct=False)
    annotation = annotate(solution, [1, -1])
    annotate(solution, [1, -1], labeler="lab-2")
    rollout_labels(solution, [(3, 4), (0, 4), (0, 4)])
    judge_labels(solution, [(0.9, "2 + 2 is added <b>correctly</b>."), (0.2, LONG_CRITIQUE), (0.1, "")])
    prm_scores(solution, [0.8, 0.3, 0.2])
    return solution, annotation


def table_rows(page: str) -> list[str]:
    return re.findall(r"<tr>.*?</tr>", page, flags=re.S)[1:]


def cell(row: str, name: str) -> str:
    return re.search(rf'<td class="source-{name}">(.*?)</td>', row, flags=re.S)[1]


def test_the_review_page_shows_people_rollouts_judge_and_prm_side_by_side(client, reviewer,
                                                                        solution_with_every_source):
    _, annotation = solution_with_every_source
    client.force_login(reviewer)
    rows = table_rows(client.get(reverse("annotate:review-detail", args=[annotation.pk])).content.decode())
    first, second, last = rows
    assert "good" in cell(first, "human") and "(2 labels)" in cell(first, "human")
    assert "3/4" in cell(first, "rollouts") and "good p=0.90" in cell(first, "judge")
    assert "0.800" in cell(first, "prm")
    assert "bad" in cell(second, "human") and "0/4" in cell(second, "rollouts")
    assert "bad p=0.20" in cell(second, "judge") and "0.300" in cell(second, "prm")
    # The people stopped at their first error: they say nothing of the last step.
    assert cell(last, "human").strip() == ""


def test_the_judges_critique_is_escaped_and_a_long_one_folded(client, reviewer, solution_with_every_source):
    _, annotation = solution_with_every_source
    client.force_login(reviewer)
    first, second, _ = table_rows(client.get(reverse("annotate:review-detail", args=[annotation.pk])).content.decode())
    assert "&lt;b&gt;correctly&lt;/b&gt;" in cell(first, "judge") and "<b>" not in cell(first, "judge")
    assert "<details" not in cell(first, "judge")
    assert '<details class="critique"><summary>' in cell(second, "judge")


def test_judge_labels_are_not_listed_as_automatic_labels(client, reviewer, solution_with_every_source):
    _, annotation = solution_with_every_source
    client.force_login(reviewer)
    for row in table_rows(client.get(reverse("annotate:review-detail", args=[annotation.pk])).content.decode()):
        automatic = re.search(r'<td class="automatic-labels">(.*?)</td>', row, flags=re.S)[1]
        assert automatic.count("auto-label ") == 1 and "math_shepherd" in automatic and "judge" not in automatic


def test_the_api_gives_every_sources_word_on_each_step(reviewer, solution_with_every_source):
    solution, _ = solution_with_every_source
    client = APIClient()
    client.force_authenticate(reviewer)
    body = client.get(f"/api/solutions/{solution.pk}/sources").json()
    assert body["solution"] == solution.pk
    first, second, last = body["steps"]
    assert first["human"] == [1, 1] and first["rollouts"] == {"soft": 0.75, "n_correct": 3, "n_rollouts": 4,
                                                              "good": True}
    assert first["judge"] == {"soft": 0.9, "critique": "2 + 2 is added <b>correctly</b>.", "good": True}
    assert first["prm"] == pytest.approx(0.8)
    assert first["verdicts"] == {"human": True, "rollouts": True, "judge": True, "prm": True}
    assert second["verdicts"] == {"human": False, "rollouts": False, "judge": False, "prm": False}
    assert last["human"] == [] and last["verdicts"]["human"] is None and last["verdicts"]["judge"] is False


def test_the_api_without_labels_says_nothing_was_said(reviewer):
    solution = SolutionFactory(steps=["One.", "Two."])
    client = APIClient()
    client.force_authenticate(reviewer)
    steps = client.get(f"/api/solutions/{solution.pk}/sources").json()["steps"]
    assert [(s["human"], s["rollouts"], s["judge"], s["prm"]) for s in steps] == [([], None, None, None)] * 2


def test_an_annotator_cannot_read_a_solutions_sources(annotator, solution_with_every_source):
    solution, _ = solution_with_every_source
    client = APIClient()
    client.force_authenticate(annotator)
    assert client.get(f"/api/solutions/{solution.pk}/sources").status_code == 403


def test_another_projects_solution_is_not_found(db, solution_with_every_source):
    solution, _ = solution_with_every_source
    other = Project.objects.create(slug="other", name="Other")
    reviewer = user_with_role("rev-other", roles.REVIEWER, other)
    client = APIClient()
    client.force_authenticate(reviewer)
    assert client.get(f"/p/other/api/solutions/{solution.pk}/sources").status_code == 404
