"""Step arithmetic: the first error (rated or predicted) and a solution's score from its steps.

One marker for "no error": None, never -1 (a rating, and in Python the last index).
"""
import numpy as np
import pytest

from steps.arithmetic import (
    AGGREGATIONS,
    AGGREGATIONS_WITH_RISK,
    RISK,
    aggregate,
    check_aggregation,
    first_error,
    predicted_first_error,
)


def test_the_first_error_is_the_first_step_rated_minus_one():
    assert first_error([1, 0, -1, 1, -1]) == 2
    assert first_error([-1, 1]) == 0  # found, and not to be confused with "none" by a truth test


def test_unrated_steps_are_passed_over_and_no_minus_one_means_no_error():
    assert first_error([None, 1, None, -1]) == 3
    assert first_error([1, None, 0]) is None
    assert first_error([]) is None


def test_the_first_error_reads_any_iterable_of_ratings():
    labels = [1, 1, 0, 1]
    assert first_error(-1 if label == 0 else label for label in labels) == 2


def test_the_predicted_first_error_is_the_first_step_below_the_threshold():
    assert predicted_first_error([0.9, 0.4, 0.2], 0.5) == 1
    assert predicted_first_error([0.1, 0.9], 0.5) == 0


def test_a_step_at_the_threshold_is_not_below_it_and_no_step_below_means_none():
    assert predicted_first_error([0.9, 0.5], 0.5) is None
    assert predicted_first_error([], 0.5) is None


def test_an_ensemble_votes_with_one_predicted_first_error_per_member():
    members = [[0.9, 0.4, 0.8], [0.9, 0.8, 0.7], [0.9, 0.3, 0.1]]  # a [M, n] tensor's tolist()
    assert [predicted_first_error(member, 0.5) for member in members] == [1, None, 1]


@pytest.mark.parametrize("how,score", [
    ("product", 0.9 * 0.5 * 0.8),
    ("min", 0.5),
    ("last", 0.8),
    ("mean", (0.9 + 0.5 + 0.8) / 3),
])
def test_each_aggregation_scores_a_solution_from_its_steps(how, score):
    assert aggregate([0.9, 0.5, 0.8], how) == pytest.approx(score)


def test_risk_is_the_mean_step_score_less_lam_times_its_sigma():
    scores, sigmas = [0.9, 0.5, 0.8], [0.1, 0.2, 0.3]
    assert aggregate(scores, RISK, sigmas=sigmas, lam=2.0) == pytest.approx((0.7 + 0.1 + 0.2) / 3)
    assert aggregate(scores, RISK, sigmas=sigmas) == pytest.approx((0.8 + 0.3 + 0.5) / 3)
    assert aggregate(scores, RISK) == aggregate(scores, "mean")  # a head without sigmas


def test_one_sigma_per_step_or_none_at_all():
    with pytest.raises(ValueError):
        aggregate([0.9, 0.5], RISK, sigmas=[0.1])


def test_a_solution_with_no_steps_has_no_score():
    for how in AGGREGATIONS_WITH_RISK:
        with pytest.raises(ValueError, match="no steps"):
            aggregate([], how)


def test_an_unknown_aggregation_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="'median'.*product, min, last, mean, risk"):
        aggregate([0.5], "median")


def test_check_aggregation_takes_the_plain_aggregations_and_risk_only_where_asked():
    assert [check_aggregation(name) for name in AGGREGATIONS] == ["product", "min", "last", "mean"]
    with pytest.raises(ValueError, match="'risk'; expected one of product, min, last, mean$"):
        check_aggregation("risk")
    assert check_aggregation("risk", AGGREGATIONS_WITH_RISK) == "risk"


def test_float32_scores_are_multiplied_as_python_floats():
    scores = np.array([0.1, 0.3, 0.7], dtype=np.float32)  # as a model's output holds them
    product = aggregate(scores, "product")
    assert type(product) is float and product == float(scores[0]) * float(scores[1]) * float(scores[2])
