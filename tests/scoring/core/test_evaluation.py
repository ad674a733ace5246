"""Evaluation metrics on small hand-made cases whose answers are worked out by hand."""
import pytest

from scoring.core import evaluation
from scoring.core.evaluation import Candidate, LabeledSample


def test_roc_auc_counts_ordered_pairs_and_half_ties():
    # Positives 0.9, 0.4; negatives 0.4, 0.1: pairs (0.9>0.4) (0.9>0.1) (0.4=0.4 half) (0.4>0.1) = 3.5/4
    assert evaluation.roc_auc([0.9, 0.4, 0.4, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875)
    assert evaluation.roc_auc([0.1, 0.9], [1, 0]) == 0.0
    assert evaluation.roc_auc([0.3, 0.5], [1, 1]) is None


def test_paired_auc_compares_step_k_with_the_reference_step_k():
    samples = [
        LabeledSample(1, [0.9, 0.2, 0.1], [1, 0, None], first_error=1),
        LabeledSample(1, [0.8, 0.7, 0.6], [None] * 3, first_error=None, is_reference=True),
        LabeledSample(2, [0.3], [0], first_error=0),
        LabeledSample(2, [0.3], [None], first_error=None, is_reference=True),
        LabeledSample(3, [0.5], [0], first_error=0),  # no reference: no pair
    ]
    pairs = evaluation.reference_pairs(samples)
    assert pairs == [(0.2, 0.7), (0.3, 0.3)]
    assert evaluation.paired_auc(pairs) == pytest.approx(0.75)


def test_processbench_f1_is_the_harmonic_mean_of_both_accuracies():
    samples = [
        LabeledSample(1, [0.9, 0.3, 0.2], [1, 0, None], first_error=1),  # predicted 1: right
        LabeledSample(2, [0.4, 0.9], [1, 0], first_error=1),  # predicted 0: wrong
        LabeledSample(3, [0.8, 0.9], [1, 1], first_error=None),  # predicted None: right
        LabeledSample(4, [0.8, 0.6], [1, 1], first_error=None),  # right at 0.5, wrong at 0.7
    ]
    at_half = evaluation.processbench_f1(samples, threshold=0.5)
    assert (at_half["acc_erroneous"], at_half["acc_correct"]) == (0.5, 1.0)
    assert at_half["f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    at_07 = evaluation.processbench_f1(samples, threshold=0.7)
    assert at_07["acc_correct"] == 0.5 and at_07["f1"] == pytest.approx(0.5)


def test_aggregations_and_risk_adjusted_score():
    mu, sigma = [0.9, 0.5, 0.8], [0.1, 0.3, 0.2]
    assert evaluation.solution_score(mu, "product") == pytest.approx(0.36)
    assert evaluation.solution_score(mu, "min") == 0.5
    assert evaluation.solution_score(mu, "last") == 0.8
    assert evaluation.solution_score(mu, "mean") == pytest.approx(2.2 / 3)
    assert evaluation.solution_score(mu, "risk", sigma, lam=1.0) == pytest.approx((0.8 + 0.2 + 0.6) / 3)


def test_best_of_n_against_majority_last_step_and_oracle():
    # One problem, two candidates: the right one has a weak middle step but a confident end.
    right = Candidate(mu=[0.9, 0.3, 0.95], correct=True, answer="5")
    wrong = Candidate(mu=[0.8, 0.7, 0.6], correct=False, answer="6")
    table = evaluation.best_of_n([[right, wrong]], ns=[1, 2])["by_n"]
    assert table["1"]["product"] == 0.5  # one candidate at a time: the base rate
    assert table["2"]["last"] == 1.0 and table["2"]["mean"] == 1.0
    assert table["2"]["min"] == 0.0 and table["2"]["product"] == 0.0  # 0.2565 < 0.336
    assert table["2"]["oracle"] == 1.0


def test_majority_vote_picks_the_most_common_answer():
    cands = [Candidate([0.1], True, "4"), Candidate([0.2], True, "4"), Candidate([0.9], False, "7")]
    table = evaluation.best_of_n([cands], ns=[3])["by_n"]
    assert table["3"]["majority"] == 1.0
    assert table["3"]["product"] == 0.0


def test_risk_adjusted_selection_prefers_the_reliable_candidate():
    sure = Candidate(mu=[0.7], correct=True, answer="1", sigma=[0.05])
    shaky = Candidate(mu=[0.75], correct=False, answer="2", sigma=[0.4])
    table = evaluation.best_of_n([[sure, shaky]], ns=[2], lam=1.0)["by_n"]
    assert table["2"]["mean"] == 0.0 and table["2"]["risk"] == 1.0


def test_calibration_ece_and_reliability_bins():
    probs = [0.15, 0.15, 0.85, 0.85]
    labels = [0, 1, 1, 1]
    result = evaluation.calibration(probs, labels, bins=10)
    # bin [0.1,0.2): conf 0.15 acc 0.5; bin [0.8,0.9): conf 0.85 acc 1.0 -> ECE = .5*.35 + .5*.15
    assert result["ece"] == pytest.approx(0.25)
    assert [(b["count"], b["accuracy"]) for b in result["bins"]] == [(2, 0.5), (2, 1.0)]


def test_the_gate_passes_equal_and_better_and_stops_worse():
    current = {"step_auc": 0.7, "calibration": {"ece": 0.1}}
    assert evaluation.not_worse({"step_auc": 0.7}, current, "step_auc")
    assert evaluation.not_worse({"step_auc": 0.71}, current, "step_auc")
    assert not evaluation.not_worse({"step_auc": 0.69}, current, "step_auc")
    assert evaluation.not_worse({"step_auc": 0.69}, current, "step_auc", tolerance=0.02)
    assert evaluation.not_worse({"calibration": {"ece": 0.05}}, current, "ece")  # lower is better
    assert not evaluation.not_worse({"step_auc": None}, current, "step_auc")


def test_evaluate_puts_everything_in_one_json_ready_dict():
    samples = [
        LabeledSample(1, [0.9, 0.2], [1, 0], first_error=1), LabeledSample(2, [0.8, 0.7], [1, 1], first_error=None)
    ]
    report = evaluation.evaluate(samples, [[Candidate([0.9], True, "1"), Candidate([0.1], False, "2")]])
    assert report["step_auc"] == 1.0 and report["n_steps"] == 4
    assert report["processbench"]["f1"] == 1.0
    assert report["best_of_n"]["by_n"]["2"]["product"] == 1.0


def test_a_constant_scorer_is_at_chance_whatever_the_candidate_order():
    right, wrong = Candidate([0.5], True, "1"), Candidate([0.5], False, "2")
    for order in ([right, wrong], [wrong, right]):
        table = evaluation.best_of_n([order], ns=[2])["by_n"]
        assert table["2"]["product"] == 0.5


def test_a_candidate_sampled_several_times_counts_each_sample_in_votes_and_in_n():
    # The wrong answer was written three times (stored once, count 3), the right one once.
    right = Candidate([0.9], True, "5")
    wrong = Candidate([0.2], False, "6", count=3)
    table = evaluation.best_of_n([[right, wrong]])["by_n"]
    assert set(table) == {"1", "2", "4"}  # four samples, not two candidates
    assert table["4"]["majority"] == 0.0  # three votes for 6 against one for 5
    assert table["4"]["product"] == 1.0 and table["4"]["oracle"] == 1.0
    assert table["1"]["product"] == 0.25  # one sample at a time: the base rate of the samples
