"""Agreement between two label sources, against figures computed by hand."""
import pytest

from steps import agreement
from steps.agreement import FirstErrorTally, StepTable


def steps_from_table(both_good: int, only_a_good: int, only_b_good: int, both_bad: int) -> list[tuple[bool, bool]]:
    return ([(True, True)] * both_good + [(True, False)] * only_a_good + [(False, True)] * only_b_good
            + [(False, False)] * both_bad)


def test_kappa_of_a_two_by_two_table_matches_the_hand_computation():
    #              b good  b bad
    #   a good       5       1      a good: 6/10
    #   a bad        2       2
    #   b good: 7/10
    # p_o = (5 + 2) / 10 = 0.7
    # p_e = 0.6 * 0.7 + 0.4 * 0.3 = 0.42 + 0.12 = 0.54
    # κ   = (0.7 - 0.54) / (1 - 0.54) = 0.16 / 0.46 = 0.347826...
    pairs = steps_from_table(5, 1, 2, 2)
    assert agreement.cohen_kappa(pairs) == pytest.approx(0.16 / 0.46)
    table = StepTable(both_good=5, only_a_good=1, only_b_good=2, both_bad=2)
    assert (table.n, table.observed) == (10, pytest.approx(0.7))


def test_perfect_agreement_is_one_and_agreement_no_better_than_chance_is_zero():
    assert agreement.cohen_kappa(steps_from_table(3, 0, 0, 2)) == pytest.approx(1.0)
    # Each says good half the time, independently: p_o = 2/4 = p_e = 0.5, so κ = 0.
    assert agreement.cohen_kappa(steps_from_table(1, 1, 1, 1)) == pytest.approx(0.0)
    # Always opposite: p_o = 0, p_e = 0.5, κ = -0.5 / 0.5 = -1.
    assert agreement.cohen_kappa(steps_from_table(0, 2, 2, 0)) == pytest.approx(-1.0)


def test_kappa_is_undefined_when_chance_alone_explains_every_agreement():
    assert agreement.cohen_kappa([]) is None
    # Both call every step good: p_e = 1 · 1 = 1, and (p_o - p_e) / (1 - p_e) is 0 / 0.
    assert agreement.cohen_kappa(steps_from_table(4, 0, 0, 0)) is None
    assert agreement.cohen_kappa(steps_from_table(0, 0, 0, 3)) is None
    # One source constant, the other not: p_e = 0.5 · 1 < 1, so κ is defined (0: no better than chance).
    assert agreement.cohen_kappa(steps_from_table(2, 0, 2, 0)) == pytest.approx(0.0)


def test_a_table_added_to_chunk_by_chunk_equals_one_built_at_once():
    pairs = steps_from_table(5, 1, 2, 2)
    chunked = StepTable()
    for chunk in (pairs[:3], pairs[3:7], pairs[7:]):
        for a, b in chunk:
            chunked.add(a, b)
    assert chunked == StepTable(5, 1, 2, 2)


def test_first_error_agreement_and_distance_match_the_hand_computation():
    first_errors = [
        (2, 2),         # same step: agree, distance 0
        (None, None),   # both say no error: agree, no distance
        (1, 3),         # both found one, 2 steps apart
        (None, 0),      # one found none: disagree, no distance
        (4, 3),         # 1 step apart
    ]
    # agreement: 2 of 5 = 0.4; distance over the 3 where both found one: (0 + 2 + 1) / 3 = 1.0
    assert agreement.first_error_agreement(first_errors) == pytest.approx(0.4)
    assert agreement.mean_first_error_distance(first_errors) == pytest.approx(1.0)
    tally = FirstErrorTally()
    for a, b in first_errors:
        tally.add(a, b)
    assert (tally.solutions, tally.same, tally.both_found, tally.distance_sum) == (5, 2, 3, 3)


def test_first_error_figures_are_undefined_without_solutions_to_compare():
    assert agreement.first_error_agreement([]) is None
    assert agreement.mean_first_error_distance([(None, None), (None, 2)]) is None


@pytest.mark.parametrize(("index", "bucket"), [(0, "1"), (1, "2"), (2, "3"), (3, "4–5"), (4, "4–5"), (5, "6+"),
                                               (40, "6+")])
def test_steps_fall_into_position_buckets_by_their_place_in_the_solution(index, bucket):
    assert agreement.position_bucket(index) == bucket
