"""The label-source benchmark: a simulated judge of known error rates, consensus by the product's
rule, and a PRM trained on each source over the same solutions."""
import io
import json
import random

import pytest
from django.core.management import CommandError

import bench
from bench import simulation_judge as judging
from bench.simulation_judge import Drawn, Rates

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_flawless_judge_gives_the_known_verdicts_and_stops_at_the_first_error():
    flawless = Rates(miss=0.0, false_alarm=0.0)
    rng = random.Random(0)
    assert flawless.first_error(2, 5, rng) == 2 and flawless.first_error(None, 5, rng) is None
    assert judging.votes(2, 5) == [(0, 1.0, 1.0), (1, 1.0, 1.0), (2, 0.0, 1.0)]


def test_a_judge_that_misses_more_than_it_invents_is_drawn_at_its_rates():
    lenient = Rates(miss=0.4, false_alarm=0.05)
    rng = random.Random(1)
    wrong = [lenient.first_error(1, 4, rng) for _ in range(4000)]
    right = [lenient.first_error(None, 4, rng) for _ in range(4000)]
    missed = sum(f is None or f > 1 for f in wrong) / len(wrong)
    flagged = sum(f is not None for f in right) / len(right)
    assert 0.36 < missed < 0.44  # a false alarm before the error (5 %) is not a miss
    assert 0.15 < flagged < 0.22  # 1 - 0.95 ** 4 of right solutions get one false alarm


def test_consensus_keeps_exactly_the_steps_rollouts_and_the_judge_agree_on():
    # Rollouts: K of 4 per step (good where K > 0). The judge missed the error at step 2 and
    # flagged step 3, where it stopped.
    drawn = Drawn(n_steps=5, first_error=2, rollouts_k=[3, 0, 0, 0, 1], judge_first_error=3, labeler_first_error=2)
    assert judging.consensus(drawn) == [(0, 1.0, 1.0), (3, 0.0, 1.0)]
    assert [i for i, *_ in judging.pooled(drawn)] == [0, 1, 2, 3, 4]
    assert judging.pooled(drawn)[0] == (0, 4 / 5, 5.0) and judging.pooled(drawn)[4] == (4, 1 / 4, 4.0)


def test_label_quality_reads_accuracy_up_to_the_first_error_and_counts_labels_after_it():
    drawn = [Drawn(n_steps=3, first_error=1, rollouts_k=[4, 0, 0], judge_first_error=None, labeler_first_error=1)]
    quality = judging.label_quality(drawn, [[(0, 1.0, 1.0), (1, 1.0, 1.0), (2, 0.0, 1.0)]])
    assert quality == {"steps_per_solution": 3.0, "accuracy": 0.5, "beyond_first_error": pytest.approx(1 / 3),
                       "first_error_agreement": 0.0}  # the labels name step 2, the error is at step 1


def test_a_bootstrap_interval_holds_the_mean():
    figure = judging.mean_interval([0.8, 0.82, 0.85, 0.9, 0.79], resamples=500)
    low, high = figure["interval_95"]
    assert low <= figure["mean"] <= high and 0.79 <= low and high <= 0.9


def test_the_quick_run_trains_every_arm_on_the_same_solutions_and_reports_consensus():
    out = io.StringIO()
    bench.call("simulate_judge", "--quick", "--json", stdout=out)
    result = json.loads(out.getvalue())
    arms = result["budgets"]["150"]
    assert set(arms) == set(judging.ARMS)
    assert all(0.5 < arm["step_auc"]["mean"] <= 1 for arm in arms.values())
    assert arms["human"]["accuracy"] == 1.0 and arms["human"]["beyond_first_error"] == 0
    assert arms["consensus"]["step_share"] < arms["rollouts"]["step_share"] == 1.0
    assert arms["consensus"]["accuracy"] > arms["rollouts"]["accuracy"]
    assert set(arms["consensus"]) >= {f"gain_over_{arm}" for arm in judging.ARMS if arm != "consensus"}


def test_bad_rates_are_named():
    with pytest.raises(CommandError, match="miss=1.5"):
        bench.call("simulate_judge", "--judge-miss", "1.5")
