"""The learnable arithmetic domain: errors at known steps, a scorer that learns, the policies' loop."""
import io
import json
import random

import pytest
from django.core.management import CommandError

import bench
from bench import learnable_domain as domain
from bench import simulation_rollouts
from bench.simulation import HeldOut
from bench.simulation_pool import arithmetic_ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # fits as small as these are fastest on one


def test_only_the_known_first_error_breaks_the_arithmetic():
    problems = domain.make_problems(300, variants=3, seed=3)
    wrong = [s for p in problems for s in p.solutions if s.first_error is not None]
    assert len(wrong) > 600 and {s.kind for s in wrong} == set(domain.ERROR_KINDS)
    for problem in problems:
        right = problem.solutions[0]
        assert right.first_error is None and all(arithmetic_ok(step) for step in right.steps)
        for s in problem.solutions[1:]:
            assert [i for i, step in enumerate(s.steps) if not arithmetic_ok(step)] == [s.first_error]
            assert s.answer != right.answer and s.steps[: s.first_error] == right.steps[: s.first_error]


def test_the_same_seed_makes_the_same_problems():
    assert domain.make_problems(20, variants=2, seed=7) == domain.make_problems(20, variants=2, seed=7)
    assert domain.make_problems(20, variants=2, seed=7) != domain.make_problems(20, variants=2, seed=8)


def test_a_step_that_is_not_arithmetic_is_named():
    with pytest.raises(ValueError, match="'twelve'"):
        domain.step_features("twelve", 0)


def test_the_scorer_learns_with_more_labels():
    from bench.simulation import evaluate_probs

    pool, held = domain.make_problems(1200, variants=2, seed=1), domain.make_problems(150, variants=3, seed=2)
    held_data, held_out = domain.Solutions.of(held), HeldOut.from_problems(held)

    def step_auc(labels: int) -> float:
        model, _ = domain.train_scorer(pool, labels=labels, seed=0)
        probs = [p.tolist() for p in held_data.split(domain.probabilities(model, held_data))]
        return evaluate_probs(held_out, probs, best_of_n=False)["step_auc"]

    few, many = step_auc(100), step_auc(3000)
    assert many > few + 0.1 and many > 0.75


def test_drawn_rollout_labels_are_shares_of_four():
    labels = domain.rollout_labels(2, 5, random.Random(0))
    assert len(labels) == 5 and all(v in {0, 0.25, 0.5, 0.75, 1} for v in labels)


def test_the_products_rollout_labelers_mostly_find_the_known_first_error():
    problems = domain.make_problems(80, variants=3, seed=4)
    agreement = simulation_rollouts.agreement(problems, seed=0)
    shepherd, omega = agreement["math_shepherd"], agreement["omegaprm"]
    # A right prefix fails all 4 rollouts with probability 0.3^4; a wrong one is redone right rarely.
    assert 0.75 < shepherd["agree_on_wrong"] < 1 and shepherd["too_early"] < 0.05
    assert 0.7 < omega["agree"] <= 1
    assert omega["rollouts_per_solution"] < shepherd["rollouts_per_solution"]  # the binary search's saving
    # A generator that always reaches the answer from a right prefix and never from a wrong one: exact.
    perfect = simulation_rollouts.agreement(problems, solve_from_right=1.0, solve_from_wrong=0.0)
    assert perfect["math_shepherd"]["agree"] == 1 and perfect["omegaprm"]["agree"] == 1


def test_rollout_disagreement_looks_only_up_to_the_first_error_either_side_sees():
    # The PRM calls step 1 wrong, the rollouts agree: later steps (rollouts fail, PRM says right) don't count.
    assert domain.rollout_disagreement([1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.9, 0.9]) == pytest.approx(0.1)
    # The PRM misses the error at step 1: that step is the disagreement.
    assert domain.rollout_disagreement([1.0, 0.0, 0.0], [0.9, 0.8, 0.9]) == pytest.approx(0.8)


def test_the_command_gives_curves_and_ratios_for_every_policy(tmp_path):
    out, output = io.StringIO(), tmp_path / "learnable.json"
    bench.call("simulate_learnable", "--problems", "150", "--heldout", "40", "--budgets", "20", "60",
               "--seeds", "0", "1", "--members", "2", "--output", str(output), "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert json.loads(output.read_text())["settings"]["seeds"] == [0, 1]
    assert set(result["strategies"]) == {"random", "convincing_wrong", "default_mix", "disagreement",
                                         "rollout_disagreement"}
    for summary in result["strategies"].values():
        assert summary["labels"] == [20, 60] and summary["seeds"] == 2
        # Every policy starts from the same random pick.
        assert summary["step_auc"]["per_seed"][0][0] == result["strategies"]["random"]["step_auc"]["per_seed"][0][0]
    assert result["efficiency"]["random"]["step_auc"]["ratio"] == pytest.approx(1.0)
    # Convincing wrong answers pick wrong answers only (the pool is a third right).
    assert result["strategies"]["convincing_wrong"]["wrong_share"]["mean"][-1] > 0.8


def test_bad_settings_are_named():
    with pytest.raises(CommandError, match="--policies"):
        bench.call("simulate_learnable", "--policies", "nope")
    with pytest.raises(CommandError, match="--budgets"):
        bench.call("simulate_learnable", "--budgets", "50", "20")
