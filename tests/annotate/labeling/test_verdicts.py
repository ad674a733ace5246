"""One step verdict, read the same by every consumer: exports, QC, agreement and review.

The fixture is PRM800K's phase-1 line (`PHASE1_LINE`): its step 2 was replaced by a human
completion, and the rejected alternative 0 there is rated -1. The verdict of that step is the
human completion's, +1; a reader that takes completion 0 says -1 and disagrees with the rest.
"""
import pytest

from annotate.labeling import quality, reviewing, verdicts
from annotate.models import Annotation, Completion, RatingOverride, StepLabel
from annotate.pool import exporting
from scoring.rescoring import label_rows
from tests.annotations import PHASE1_LINE, annotate, import_lines
from tests.factories import user_with_role

pytestmark = pytest.mark.django_db


def test_first_error_is_the_first_minus_one():
    assert verdicts.first_error([1, 0, -1, -1]) == 2
    assert verdicts.first_error([1, None, 0]) is None


@pytest.fixture
def phase1(tmp_path) -> tuple[Annotation, Annotation]:
    """The phase-1 line, and a second annotator of the same solution who rates both steps +1."""
    import_lines(tmp_path, [PHASE1_LINE])
    line = Annotation.objects.get()
    second = annotate(line.solution, [1, 1], labeler="second")
    # Gold agrees with the verdict, so QC against gold has something to compare.
    line.solution.steps.update(gold_rating=1)
    return line, second


def rows(format: str) -> list[dict]:
    return list(exporting.iter_rows(format=format, options=exporting.ExportOptions()))


def assert_every_consumer_reads(line: Annotation, second: Annotation, expected: tuple[int, int]) -> None:
    """What each consumer says of `line`'s two steps, given that `second` rated both +1 (as gold does)."""
    good = [rating in (0, 1) for rating in expected]
    agreeing = sum(rating == 1 for rating in expected)
    assert verdicts.verdicts(line).ratings == expected
    # TRL: the row of the line's walked path (its texts are the pool's; rejected alternatives
    # have rows of their own before it).
    pool_texts = list(line.solution.steps.order_by("index").values_list("text", flat=True))
    walked = pool_texts[: (expected.index(-1) + 1) if -1 in expected else None]
    trl = next(row for row in rows("trl") if row["completions"] == walked)
    assert trl["labels"] == good[: len(walked)]
    # ProcessBench: one row for the solution; the two agree, or the reviewed line decides.
    (processbench,) = rows("processbench")
    assert processbench["label"] == (expected.index(-1) if -1 in expected else -1)
    (soft,) = rows("soft")
    assert soft["k"] == [1 + g for g in good] and soft["n"] == [2, 2]
    gold = quality.gold_agreement([line])
    assert (gold.steps_compared, gold.steps_agreeing) == (2, agreeing)
    between = quality.inter_annotator()
    assert (between.items, between.steps_compared, between.steps_agreeing) == (1, 2, agreeing)
    disagreeing = set(reviewing.annotations_for_review(disagreement=True).values_list("pk", flat=True))
    assert (line.pk in disagreeing) == (expected != (1, 1))
    review = reviewing.review_rows(annotation=line, others=[second])
    assert [row.ratings for row in review] == [[expected[0], 1], [expected[1], 1]]
    quality.make_gold(annotation=line)
    assert tuple(line.solution.steps.order_by("index").values_list("gold_rating", flat=True)) == expected


def test_phase1_line_gives_the_same_verdicts_in_exports_qc_agreement_and_review(phase1):
    line, second = phase1
    assert_every_consumer_reads(line, second, (1, 1))


def test_an_override_of_a_human_completion_changes_every_consumer_at_once(phase1, reviewer):
    line, second = phase1
    reviewing.override_rating(annotation=line, index=1, rating=-1, reviewer=reviewer, note="no, still wrong")
    assert_every_consumer_reads(line, second, (1, -1))
    # The rating is recorded on the human completion; the rejected alternatives are untouched.
    step = StepLabel.objects.get(annotation=line, index=1)
    assert step.human_completion["rating"] == -1
    assert step.human_completion["text"] == PHASE1_LINE["label"]["steps"][1]["human_completion"]["text"]
    assert list(step.completions.order_by("index").values_list("rating", flat=True)) == [-1, 0]
    override = RatingOverride.objects.get()
    assert (override.step_label, override.completion, override.previous_rating, override.new_rating) == (
        step, None, 1, -1)


def test_an_override_edits_the_alternative_the_annotator_continued_with(tmp_path, reviewer):
    line = {**PHASE1_LINE, "label": {**PHASE1_LINE["label"], "steps": [
        {**PHASE1_LINE["label"]["steps"][0], "chosen_completion": 1}, PHASE1_LINE["label"]["steps"][1],
    ]}}
    line["label"]["steps"][0]["completions"] = [
        {"text": "The denominator factors as $(x+3)(x-2)$.", "rating": 1, "flagged": None},
        {"text": "Factor the denominator.", "rating": 0, "flagged": None},
    ]
    import_lines(tmp_path, [line])
    annotation = Annotation.objects.get()
    assert verdicts.verdicts(annotation).ratings == (0, 1)
    reviewing.override_rating(annotation=annotation, index=0, rating=-1, reviewer=reviewer)
    assert verdicts.verdicts(annotation).ratings == (-1, 1)
    ratings = Completion.objects.filter(step_label__annotation=annotation, step_label__index=0).order_by("index")
    assert list(ratings.values_list("rating", flat=True)) == [1, -1]  # Alternative 0 was not the one continued.
    override = RatingOverride.objects.get()
    assert (override.completion.index, override.step_label.index, override.previous_rating) == (1, 0, 0)
    # The line now ends in an error at step 1, so it finished as found_error (re-derived).
    assert Annotation.objects.get().finish_reason == "found_error"
    assert rows("trl")[-1]["labels"] == [False]


def test_an_override_of_a_local_label_changes_the_chosen_completion(reviewer):
    from tests.factories import SolutionFactory

    annotator = user_with_role("x", "annotator")
    annotation = annotate(SolutionFactory(steps=["a", "b", "c"]), [1, 1, -1], annotator=annotator)
    reviewing.override_rating(annotation=annotation, index=2, rating=1, reviewer=reviewer)
    assert verdicts.verdicts(annotation).ratings == (1, 1, 1)
    assert verdicts.verdicts(annotation).first_error is None
    assert rows("processbench")[0]["label"] == -1


def test_an_override_rates_the_pool_steps_own_text_not_the_alternative_stopped_at(tmp_path, reviewer):
    from tests.annotations import PHASE2_LINE

    # The annotator stopped at step 3 with two alternatives: 0 (the pool's step) rated neutral, 1 rated wrong.
    steps = [*PHASE2_LINE["label"]["steps"][:2], {**PHASE2_LINE["label"]["steps"][2], "completions": [
        {"text": PHASE2_LINE["question"]["pre_generated_steps"][2], "rating": 0, "flagged": False},
        {"text": "So the answer is 5000.", "rating": -1, "flagged": False},
    ]}]
    import_lines(tmp_path, [{**PHASE2_LINE, "label": {**PHASE2_LINE["label"], "steps": steps}}])
    annotation = Annotation.objects.get()
    before = verdicts.verdicts(annotation)
    assert before.ratings == (1, 0, -1) and before.pool_ratings == (1, 0, 0, None, None)
    reviewing.override_rating(annotation=annotation, index=2, rating=1, reviewer=reviewer)
    after = verdicts.verdicts(annotation)
    # The pool step is +1 now; the annotator's -1 on the alternative stands, so it is still found_error.
    assert after.ratings == (1, 0, -1) and after.pool_ratings == (1, 0, 1, None, None)
    assert RatingOverride.objects.get().completion.index == 0
    annotation.refresh_from_db()
    assert annotation.finish_reason == "found_error"


def test_phase1_line_training_rows_match_the_verdicts(phase1, reviewer):

    line, second = phase1
    (row,) = label_rows.gather_rows(solution_ids=[line.solution_id])
    assert row.ratings == (verdicts.verdicts(line).ratings, verdicts.verdicts(second).ratings)
    reviewing.override_rating(annotation=line, index=1, rating=-1, reviewer=reviewer)
    (row,) = label_rows.gather_rows(solution_ids=[line.solution_id])
    assert row.ratings[0] == (1, -1)


def test_no_error_is_none_everywhere_and_minus_one_only_in_the_processbench_file():
    from tests.factories import SolutionFactory

    solution = SolutionFactory(steps=["a", "b"], is_correct=True)
    clean = verdicts.verdicts(annotate(solution, [1, 0], labeler="x"))
    assert clean.first_error is None and clean.decides_first_error("solution")
    assert not clean.decides_first_error("give_up")
    wrong = verdicts.verdicts(annotate(SolutionFactory(steps=["a", "b"], is_correct=False), [1, -1], labeler="y"))
    assert wrong.first_error == 1 and wrong.decides_first_error("found_error")
    assert [row["label"] for row in rows("processbench")] == [-1, 1]
