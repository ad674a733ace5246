"""The promotion gate on plain inputs: a paired bootstrap of the gain, and enough held-out evidence."""
import random

import pytest

from annotate.models import LabelingConfig
from scoring.core import evaluation
from scoring.learning import promotion
from scoring.learning.promotion import Evidence
from tests.scoring.projects import two_projects

RULE = Evidence(min_gain=0.0, min_solutions=50, min_steps=200, val_fraction=0.2, resamples=300)


def held_out(n: int, *, seed: int = 0) -> list[tuple[int, list[int | None], int | None]]:
    """n labeled solutions of 5 steps: half all good, half with a first error at a random step."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        first = rng.randrange(5) if i % 2 else None
        labels = [1] * 5 if first is None else [1] * first + [0] + [None] * (4 - first)
        rows.append((i, labels, first))
    return rows


def scored(rows, *, separation: float, seed: int) -> list[evaluation.LabeledSample]:
    """A model whose good steps score `separation` higher than its bad ones, plus noise."""
    rng = random.Random(seed)
    samples = []
    for problem_id, labels, first in rows:
        probs = [min(1.0, max(0.0, 0.5 + (separation / 2 if y != 0 else -separation / 2) + rng.gauss(0, 0.2)))
                 for y in labels]
        samples.append(evaluation.LabeledSample(problem_id, probs, labels, first))
    return samples


def test_two_held_out_solutions_never_promote_however_much_better():
    rows = [(1, [1, 1], None), (2, [1, 0], 1)]
    perfect = [evaluation.LabeledSample(p, [0.9, 0.9 if f is None else 0.1], y, f) for p, y, f in rows]
    constant = [evaluation.LabeledSample(p, [0.5, 0.5], y, f) for p, y, f in rows]
    decision = promotion.gate(new=perfect, current=constant, metric="step_auc", evidence=RULE)
    assert decision["new"] == 1.0 and decision["current"] == 0.5  # what promoted the first retrain
    assert decision["outcome"] == "not_enough_evidence" and decision["promoted"] is False
    assert (decision["n_solutions"], decision["n_steps"]) == (2, 4)
    # 4 steps in 2 solutions: 200 steps take 100 held-out solutions, 98 more; 1 in 5 problems is held out.
    assert decision["more_held_out_needed"] == 98 and decision["more_labels_needed"] == 490
    assert "2 held-out labeled solutions with 4 labeled steps" in promotion.describe(decision)


def test_a_clearly_better_model_on_enough_held_out_solutions_is_promoted():
    rows = held_out(120)
    better, worse = scored(rows, separation=0.6, seed=1), scored(rows, separation=0.0, seed=2)
    decision = promotion.gate(new=better, current=worse, metric="step_auc", evidence=RULE)
    assert decision["n_solutions"] == 120 and decision["n_steps"] >= 200
    low, high = decision["interval"]
    assert 0 < low < decision["gain"] < high and decision["resamples"] == 300
    assert decision["outcome"] == "promoted" and decision["promoted"] is True
    # The same pair the other way round is rejected, not "not enough evidence": the data were enough.
    reverse = promotion.gate(new=worse, current=better, metric="step_auc", evidence=RULE)
    assert reverse["outcome"] == "rejected" and reverse["interval"][1] < 0


def test_a_gain_within_the_noise_is_rejected():
    rows = held_out(120)
    a, b = scored(rows, separation=0.3, seed=3), scored(rows, separation=0.3, seed=4)
    decision = promotion.gate(new=a, current=b, metric="step_auc", evidence=RULE)
    low, high = decision["interval"]
    assert low < 0 < high and decision["outcome"] == "rejected"


@pytest.mark.django_db
def test_the_projects_min_gain_and_the_runs_tolerance_move_the_bar():
    gsm8k, math = two_projects()
    # More than any AUC gain can be:
    LabelingConfig.objects.update_or_create(project=gsm8k, defaults={"promotion_min_gain": 0.9})
    LabelingConfig.objects.update_or_create(project=math, defaults={"promotion_min_gain": 0.0})
    rows = held_out(120)
    better, worse = scored(rows, separation=0.6, seed=1), scored(rows, separation=0.0, seed=2)

    def outcome(rule: Evidence) -> str:
        return promotion.gate(new=better, current=worse, metric="step_auc", evidence=rule)["outcome"]

    assert outcome(Evidence.of(gsm8k)) == "rejected"
    assert outcome(Evidence.of(math)) == "promoted"
    assert outcome(Evidence.of(math, tolerance=-0.9)) == "rejected"


@pytest.mark.django_db
def test_a_projects_bar_comes_from_its_settings_and_a_new_project_starts_from_the_environment(settings):
    settings.STEPWISE_PROMOTION_MIN_SOLUTIONS, settings.STEPWISE_PROMOTION_MIN_STEPS = 3, 4
    gsm8k, math = two_projects()
    LabelingConfig.objects.update_or_create(project=math, defaults={"promotion_min_solutions": 7})
    rule = Evidence.of(gsm8k)
    assert (rule.min_gain, rule.min_solutions, rule.min_steps) == (settings.STEPWISE_PROMOTION_MIN_GAIN, 3, 4)
    assert Evidence.of(math).min_solutions == 7


def test_an_unmeasurable_metric_is_not_enough_evidence_even_on_many_solutions():
    rows = [(i, [1] * 5, None) for i in range(60)]  # no bad step: no AUC
    samples = [evaluation.LabeledSample(p, [0.7] * 5, y, f) for p, y, f in rows]
    decision = promotion.gate(new=samples, current=samples, metric="step_auc", evidence=RULE)
    assert decision["outcome"] == "not_enough_evidence" and "cannot be measured" in decision["reason"]


def test_without_a_current_model_the_new_one_is_promoted():
    assert promotion.gate(new=[], current=None, metric="step_auc", evidence=RULE)["outcome"] == "promoted"


@pytest.mark.parametrize("metric", ["step_auc", "processbench_f1", "ece"])
def test_the_bootstrap_of_a_model_against_itself_is_zero(metric):
    samples = scored(held_out(40), separation=0.4, seed=5)
    paired = evaluation.paired_bootstrap(samples, samples, metric, resamples=50)
    assert paired.gain == paired.low == paired.high == 0.0 and paired.resamples == 50


def test_ece_gains_when_it_falls():
    rows = held_out(80)
    calibrated = [evaluation.LabeledSample(p, [0.95 if y else 0.05 for y in labels], labels, f)
                  for p, labels, f in rows]
    overconfident = [evaluation.LabeledSample(p, [0.99] * len(labels), labels, f) for p, labels, f in rows]
    paired = evaluation.paired_bootstrap(calibrated, overconfident, "ece", resamples=100)
    assert paired.low is not None and paired.low > 0


def test_the_bootstrap_refuses_unpaired_inputs():
    a = scored(held_out(4), separation=0.4, seed=1)
    with pytest.raises(ValueError, match="same solutions"):
        evaluation.paired_bootstrap(a, a[::-1], "step_auc")


def test_the_gate_metric_is_what_evaluate_reports():
    samples = scored(held_out(30), separation=0.4, seed=6)
    report = evaluation.evaluate(samples)
    for metric in evaluation.GATE_METRICS:
        assert evaluation.gate_metric(samples, metric) == pytest.approx(evaluation.metric_value(report, metric))


def test_average_ranks_share_ties():
    assert evaluation.roc_auc([0.1, 0.5, 0.5, 0.9], [0, 0, 1, 1]) == pytest.approx(0.875)
