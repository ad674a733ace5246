"""Quality measures: kappa, agreement with gold, agreement between annotators, gold items."""
import pytest
from django.urls import reverse

from annotate.labeling import actions as labeling
from annotate.labeling import quality, queueing
from annotate.models import AutoLabelRun, AutoStepLabel, LabelingConfig, Project, QueueItem
from tests.factories import SolutionFactory, user_with_role

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_cohens_kappa_matches_a_hand_computed_value():
    # 10 pairs, 7 agreeing; marginals a: 5x1, 3x0, 2x-1; b: 4x1, 4x0, 2x-1.
    pairs = [(1, 1)] * 4 + [(1, 0)] + [(0, 0)] * 2 + [(0, -1)] + [(-1, -1), (-1, 0)]
    expected_chance = (5 * 4 + 3 * 4 + 2 * 2) / 100
    assert quality.cohens_kappa(pairs) == pytest.approx((0.7 - expected_chance) / (1 - expected_chance))
    assert quality.cohens_kappa([(1, 1), (1, 1)]) == 1.0
    assert quality.cohens_kappa([]) is None
    assert quality.cohens_kappa([(1, -1), (-1, 1)]) == pytest.approx(-1.0)


def gold_solution(ratings):
    solution = SolutionFactory(is_gold=True, steps=[f"s{i}" for i in range(len(ratings))])
    for step, rating in zip(solution.steps.order_by("index"), ratings):
        step.gold_rating = rating
        step.save()
    return solution


def labeled(annotator, ratings):
    task = queueing.claim_next(annotator=annotator)
    for index, rating in enumerate(ratings):
        labeling.rate(annotation=task, index=index, rating=rating)
    labeling.submit(annotation=task)
    return task


def test_agreement_with_gold_counts_steps_and_first_errors(annotator):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"qc_rate": 1.0})
    gold_solution([1, 1, -1, 1])
    labeled(annotator, [1, -1])  # Put the error one step early.
    standing = quality.gold_standing(annotator=annotator)
    assert (standing.items, standing.steps_compared, standing.steps_agreeing) == (1, 2, 1)
    assert standing.step_accuracy == 0.5 and standing.first_error_agreement == 0.0


def test_agreement_with_gold_when_the_first_error_matches(annotator):
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"qc_rate": 1.0})
    gold_solution([1, 0, -1, 1])
    labeled(annotator, [1, 0, -1])
    standing = quality.gold_standing(annotator=annotator)
    assert standing.step_accuracy == 1.0 and standing.first_error_agreement == 1.0


def test_inter_annotator_agreement_on_overlapped_items():
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"overlap_k": 2, "qc_rate": 0})
    SolutionFactory(steps=["a", "b", "c"])
    SolutionFactory(steps=["d", "e"])
    queueing.ensure_default_queue()
    first, second, third = (user_with_role(n, "annotator") for n in ("first", "second", "third"))
    labeled(first, [1, 1, 1])
    labeled(second, [1, 1, -1])
    labeled(first, [1, 0])
    labeled(third, [1, 0])
    overall = quality.inter_annotator()
    assert overall.items == 2 and overall.steps_compared == 5 and overall.steps_agreeing == 4
    assert overall.first_error_agreement == 0.5
    assert overall.kappa == pytest.approx(quality.cohens_kappa([(1, 1), (1, 1), (1, -1), (1, 1), (0, 0)]))
    assert quality.inter_annotator(annotator=third).items == 1
    assert quality.inter_annotator(annotator=third).step_accuracy == 1.0


def test_make_gold_takes_the_solution_out_of_ordinary_work(annotator):
    SolutionFactory(steps=["a", "b"])
    other = SolutionFactory(steps=["c"])
    queueing.ensure_default_queue()
    task = labeled(annotator, [1, -1])
    quality.make_gold(annotation=task)
    assert list(task.solution.steps.order_by("index").values_list("gold_rating", flat=True)) == [1, -1]
    assert QueueItem.objects.get(solution=other).status == QueueItem.Status.AVAILABLE


def machine_labels(solution, soft):
    """A judge run and a rollout run giving every step of the solution P(good) `soft`."""
    for method, counts in ((AutoLabelRun.Method.JUDGE, None), (AutoLabelRun.Method.MATH_SHEPHERD, 4)):
        run = AutoLabelRun.objects.create(method=method, source="machine")
        AutoStepLabel.objects.bulk_create(
            AutoStepLabel(run=run, step=step, soft=soft, critique="machine's word",
                          n_rollouts=counts, n_correct=None if counts is None else round(soft * counts))
            for step in solution.steps.all())


def test_judge_and_rollout_labels_never_count_in_quality_control(annotator, reviewer, client):
    """Gold agreement, agreement between people and the quality page are about people: machine
    labels on a gold item or an overlapped one, however they disagree, change no figure."""
    LabelingConfig.objects.update_or_create(project=Project.objects.sole(), defaults={"qc_rate": 1.0, "overlap_k": 2})
    gold = gold_solution([1, 1, -1])
    labeled(annotator, [1, -1])
    shared = SolutionFactory(steps=["a", "b"])
    queueing.ensure_default_queue()
    other = user_with_role("other", "annotator")
    labeled(annotator, [1, 1])
    labeled(other, [1, -1])
    client.force_login(reviewer)

    def figures():
        standing, overall = quality.gold_standing(annotator=annotator), quality.inter_annotator()
        page = client.get(reverse("annotate:quality")).content.decode()
        return standing, overall, quality.screening_status(annotator=annotator), page[page.index("<section"):]

    before = figures()
    machine_labels(gold, 0.0)
    machine_labels(shared, 0.0)
    assert figures() == before
    assert before[0].items == 1 and before[1].items == 1
