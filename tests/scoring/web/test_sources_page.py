"""The sources page: how far people, rollouts, the judge and the PRM agree over the pool.

The fixture's figures are worked out by hand below, one 2x2 table per pair of sources
(steps.agreement's κ = (n·agreed − E) / (n² − E), E = a_good·b_good + a_bad·b_bad).
"""
import html
import re

import pytest
from django.urls import reverse

from scoring.rescoring import source_agreement
from tests.annotations import annotate
from tests.factories import SolutionFactory
from tests.sources_fixtures import judge_labels, prm_scores, rollout_labels


@pytest.fixture
def pool(db):
    """Four solutions; verdicts per step (✓ good, ✗ bad, · nothing said):

        solution        people   rollouts      judge        PRM
        s1 (gsm8k)      ✓ ✗ ·    ✓ ✗ ✗ (3/4…)  ✓ ✗ ✗        ✓ ✗ ✗      all agree
        s2 (gsm8k)      ✓ ✓ ✓    ✓ ✓ ✗         ✓ ✗ ✗        ✓ ✓ ✓      7 pairs at odds (0 + 3 + 4)
        s3 (math)       · ·      ✓ ·           ✗ ✓          · ·        1 pair at odds
        s4 (math)       · ·      · ·           · ·          ✓ ✓        no label but the PRM's: not considered
    """
    s1 = SolutionFactory(source="gsm8k", steps=["a", "b", "c"], is_correct=False)
    annotate(s1, [1, -1])
    rollout_labels(s1, [(3, 4), (0, 4), (0, 4)])
    judge_labels(s1, [(0.9, "fine"), (0.2, "wrong sum"), (0.1, "follows the wrong sum")])
    prm_scores(s1, [0.8, 0.3, 0.2])
    s2 = SolutionFactory(source="gsm8k", steps=["a", "b", "c"], is_correct=False)
    annotate(s2, [1, 1, 1])
    rollout_labels(s2, [(4, 4), (1, 4), (0, 4)])
    judge_labels(s2, [(0.9, "fine"), (0.3, "doubtful"), (0.2, "wrong")])
    prm_scores(s2, [0.9, 0.9, 0.9])
    s3 = SolutionFactory(source="math", steps=["a", "b"], is_correct=False)
    rollout_labels(s3, [(2, 4)])
    judge_labels(s3, [(0.2, "bad start"), (0.9, "fine")])
    s4 = SolutionFactory(source="math", steps=["a", "b"])
    prm_scores(s4, [0.9, 0.9])
    return s1, s2, s3, s4


def page_of(client, user) -> str:
    client.force_login(user)
    response = client.get(reverse("scoring:sources"))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def row(page: str, section: str, pair: str) -> list[str]:
    """The cells of a pair's row in a section of the page, as text."""
    part = re.search(rf'id="{section}".*?</section>', page, flags=re.S)[0]
    found = re.search(rf'<tr class="pair-{pair}">(.*?)</tr>', part, flags=re.S)[1]
    return [text(cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", found, re.S)]


def text(markup: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup)).strip()


# Pair: κ, steps both labeled, steps agreed, same first error, solutions compared, mean distance, both found one.
#   human·rollouts  table ✓✓ 3, ✓✗ 1, ✗✓ 0, ✗✗ 1; n 5, a_good 4, b_good 3: E = 12 + 2 = 14, agreed 4
#                   κ = (20 − 14) / (25 − 14) = 6/11 = 0.55. First errors s1 (1, 1), s2 (none, 2): 1 of 2.
#   human·judge     ✓✓ 2, ✓✗ 2, ✗✗ 1; n 5, a_good 4, b_good 2: E = 8 + 3 = 11, agreed 3
#                   κ = (15 − 11) / (25 − 11) = 4/14 = 0.29. First errors s1 (1, 1), s2 (none, 1): 1 of 2.
#   rollouts·judge  ✓✓ 2, ✓✗ 2 (s2 step 2, s3 step 1), ✗✗ 3; n 7, a_good 4, b_good 2: E = 8 + 15 = 23, agreed 5
#                   κ = (35 − 23) / (49 − 23) = 12/26 = 0.46. First errors s1 (1, 1), s2 (2, 1); s3's
#                   rollouts labeled one step of two and called none bad, so they say nothing there:
#                   1 of 2 the same, distance (0 + 1) / 2 = 0.50.
#   human·prm       ✓✓ 4, ✗✗ 1: E = 16 + 1 = 17, agreed 5, κ = (25 − 17) / (25 − 17) = 1.00; s2 both "no error": 2 of 2.
#   rollouts·prm    ✓✓ 3, ✗✓ 1, ✗✗ 2; n 6, a_good 3, b_good 4: E = 12 + 6 = 18, κ = (30 − 18) / (36 − 18) = 0.67.
#   judge·prm       ✓✓ 2, ✗✓ 2, ✗✗ 2; n 6, a_good 2, b_good 4: E = 8 + 8 = 16, κ = (24 − 16) / (36 − 16) = 0.40.
EXPECTED = {
    "human-rollouts": ["0.55", "5", "80%", "50%", "2", "0.00", "1"],
    "human-judge": ["0.29", "5", "60%", "50%", "2", "0.00", "1"],
    "rollouts-judge": ["0.46", "7", "71%", "50%", "2", "0.50", "2"],
    "human-prm": ["1.00", "5", "100%", "100%", "2", "0.00", "1"],
    "rollouts-prm": ["0.67", "6", "83%", "50%", "2", "0.00", "1"],
    "judge-prm": ["0.40", "6", "67%", "50%", "2", "0.00", "1"],
}


def test_each_pair_of_sources_shows_kappa_first_error_agreement_and_the_counts_behind_them(client, reviewer, pool):
    page = page_of(client, reviewer)
    assert "over 3 solutions" in page and "newest" not in page
    for pair, figures in EXPECTED.items():
        assert row(page, "sources-overall", pair)[1:] == figures, pair


def test_kappa_is_broken_down_by_the_steps_position(client, reviewer, pool):
    page = page_of(client, reviewer)
    # human·rollouts: step 1 both ✓ twice (κ undefined), step 2 s1 ✗✗ s2 ✓✓ (κ 1), step 3 s2 ✓✗ alone
    # (a_good 1, b_good 0: E = 0, κ = (0 − 0) / (1 − 0) = 0).
    assert row(page, "sources-by-position", "human-rollouts")[1:] == ["— (2)", "1.00 (2)", "0.00 (1)", "— (0)",
                                                                      "— (0)"]
    # rollouts·judge: step 1 s1 ✓✓ s2 ✓✓ s3 ✓✗ (a_good 3, b_good 2, n 3: E = 6 + 0 = 6, agreed 2,
    # κ = (6 − 6) / (9 − 6) = 0); step 2 s1 ✗✗ s2 ✓✗ (E = 0 + 2 = 2, agreed 1, κ = (2 − 2) / (4 − 2) = 0).
    assert row(page, "sources-by-position", "rollouts-judge")[1:3] == ["0.00 (3)", "0.00 (2)"]


def test_figures_are_broken_down_by_the_solutions_origin(client, reviewer, pool):
    figures = {origin: dict(pairs) for origin, pairs in source_agreement.pool_agreement(
        project=pool[0].project).by_origin}
    assert list(figures) == ["gsm8k", "math"]
    math = figures["math"][("rollouts", "judge")]
    assert (math.steps.n, math.steps.only_a_good, math.first_errors.solutions) == (1, 1, 0)
    assert figures["math"][("human", "judge")].steps.n == 0
    gsm8k = figures["gsm8k"][("rollouts", "judge")]
    assert (gsm8k.steps.n, gsm8k.first_errors.solutions, gsm8k.first_errors.same) == (6, 2, 1)
    page = page_of(client, reviewer)
    by_origin = text(re.search(r'id="sources-by-origin".*?</section>', page, flags=re.S)[0])
    assert "gsm8k human · rollouts 0.55 (5) 50% (2) 0.00 (1)" in by_origin
    assert "math human · rollouts — (0) — (0) — (0)" in by_origin
    assert "rollouts · judge 0.00 (1) — (0) — (0)" in by_origin


def test_the_solutions_the_sources_disagree_on_most_come_first_linked_to_their_review(client, reviewer, pool):
    s1, s2, s3, _ = pool
    page = page_of(client, reviewer)
    listed = re.findall(r'<tr class="disagreement">(.*?)</tr>', page, flags=re.S)
    assert [re.search(r"#(\d+)", found)[1] for found in listed] == [str(s2.pk), str(s3.pk)]
    review = reverse("annotate:review-detail", args=[s2.annotations.get().pk])
    assert f'href="{review}"' in listed[0] and ">7<" in listed[0]
    assert "step 2: human ✓, rollouts ✓, judge ✗, prm ✓" in listed[0] and "step 1:" not in listed[0]
    assert "review" not in listed[1] and "step 1: human ·, rollouts ✓, judge ✗, prm ·" in listed[1]


def test_chunks_and_a_cap_give_the_same_counts_as_one_pass(pool):
    project = pool[0].project
    whole = source_agreement.pool_agreement(project=project)
    chunked = source_agreement.pool_agreement(project=project, chunk_size=1)
    assert [p.overall for p in chunked.pairs] == [p.overall for p in whole.pairs]
    capped = source_agreement.pool_agreement(project=project, limit=2)
    assert (capped.solutions, capped.capped) == (2, True)
    # The newest two: s2 and s3, not s1.
    assert capped.pairs[0].overall.steps.n == 3


def test_the_page_says_when_it_reads_only_the_newest_solutions(client, reviewer, pool, monkeypatch):
    monkeypatch.setattr(source_agreement, "MAX_SOLUTIONS", 2)
    assert "the newest 2 only" in page_of(client, reviewer)


def test_without_a_current_model_the_prm_says_nothing(client, reviewer, db):
    s = SolutionFactory(steps=["a", "b"])
    annotate(s, [1, 1])
    judge_labels(s, [(0.9, "fine"), (0.9, "fine")])
    page = page_of(client, reviewer)
    assert "no current model" in page
    # Both call both steps good: E = 2 · 2 + 0 = n², κ is 0 / 0.
    assert row(page, "sources-overall", "human-judge")[1:3] == ["—", "2"]
    assert row(page, "sources-overall", "judge-prm")[1:3] == ["—", "0"]


def test_an_annotator_cannot_see_the_sources_page(client, annotator, pool):
    client.force_login(annotator)
    assert client.get(reverse("scoring:sources")).status_code == 403


def test_reviewers_find_the_page_in_the_navigation(client, reviewer, annotator, db):
    client.force_login(reviewer)
    assert f'href="{reverse("scoring:sources")}"' in client.get(reverse("annotate:review-list")).content.decode()
    client.force_login(annotator)
    assert reverse("scoring:sources") not in client.get(reverse("annotate:home")).content.decode()


def test_the_page_and_the_api_read_the_same_verdicts(client, reviewer, pool):
    _, s2, _, _ = pool
    page = page_of(client, reviewer)
    listed = re.findall(r'<tr class="disagreement">(.*?)</tr>', page, flags=re.S)[0]
    steps = client.get(f"/api/solutions/{s2.pk}/sources").json()["steps"]
    mark = {True: "✓", False: "✗", None: "·"}
    for number in (2, 3):
        said = ", ".join(f"{source} {mark[v]}" for source, v in steps[number - 1]["verdicts"].items())
        assert f"step {number}: {said}" in listed
