"""Rollout labels (scoring.generation.rollouts) from a real local generator: Math-Shepherd counts, OmegaPRM's search."""
import io
import math

import pytest

import bench
from bench.tiny import build_tiny_generator
from scoring.generation import rollouts
from scoring.generation.generators import LocalGenerator, SamplingParams
from steps.grading import grade


@pytest.fixture(scope="module")
def babbler(tmp_path_factory):
    """A tiny random LM: its completions are noise that (almost) never states an answer."""
    return LocalGenerator(build_tiny_generator(tmp_path_factory.mktemp("babbler")), device="cpu")


@pytest.fixture(scope="module")
def silent(tmp_path_factory):
    """A tiny LM that ends every completion at once: a rollout's answer is its prefix's own."""
    return LocalGenerator(build_tiny_generator(tmp_path_factory.mktemp("silent"), ends_at_once=True), device="cpu")


def task(steps, answer="7"):
    return rollouts.RolloutTask(problem="What is 3 + 4?", answer=answer, steps=tuple(steps))


def claims(values):
    """Steps each ending with an answer claim (the last line is where the answer is read)."""
    return [f"Step {i}: so the answer is {v}" for i, v in enumerate(values)]


PARAMS = SamplingParams(n=3, max_tokens=12, seed=0)


# --- the binary search over a K oracle ----------------------------------------------------------


@pytest.mark.parametrize("n_steps", [1, 2, 3, 5, 8, 13])
def test_bisection_finds_the_first_zero_of_every_monotone_sequence_in_log_calls(n_steps):
    for first_bad in range(n_steps + 1):
        ks = [2] * first_bad + [0] * (n_steps - first_bad)
        found, asked = rollouts.first_error_by_bisection(n_steps, lambda length, ks=ks: ks[length - 1])
        assert found == (first_bad if first_bad < n_steps else None)
        assert len(asked) <= math.ceil(math.log2(n_steps + 1))
        assert len(set(asked)) == len(asked)


# --- Math-Shepherd counts -------------------------------------------------------------------------


def test_k_is_the_number_of_returned_completions_whose_answer_grades_right(babbler):
    steps = ["3 + 4 = 7.", "# Answer\n\n7"]
    result = rollouts.label_steps("math_shepherd", task(steps), babbler, PARAMS)
    assert [s.index for s in result.steps] == [0, 1]
    for step in result.steps:
        prefix = result.measured[step.index + 1]
        assert step.n_rollouts == len(prefix.answers) == PARAMS.n
        assert step.n_correct == sum(grade(answer=a, truth="7") is True for a in prefix.answers)
        assert step.soft == step.n_correct / step.n_rollouts
    assert result.rollouts == result.full_sweep_rollouts == len(steps) * PARAMS.n
    assert result.tokens == sum(p.completion_tokens for p in result.measured.values()) > 0


def test_a_prefix_that_states_the_right_answer_is_right_when_completions_end_at_once(silent):
    right = rollouts.label_steps("math_shepherd", task(["3 + 4 = 7.", "# Answer\n\n7"]), silent, PARAMS)
    wrong = rollouts.label_steps("math_shepherd", task(["3 + 4 = 8.", "# Answer\n\n8"]), silent, PARAMS)
    # The first prefix states no answer yet (a wrong outcome); the whole right solution states 7.
    assert [(s.n_correct, s.n_rollouts) for s in right.steps] == [(0, 3), (3, 3)]
    assert [s.n_correct for s in wrong.steps] == [0, 0]
    assert right.first_error == wrong.first_error == 0


def test_a_completion_running_on_past_its_answer_is_graded_by_the_first_answer_stated(babbler):
    # The babbler never stops before max_tokens: whatever it writes after the stated answer is ignored.
    result = rollouts.label_steps("math_shepherd", task(["3 + 4 = 7.", "# Answer\n\n7"]), babbler, PARAMS)
    assert result.measured[2].answers == ("7",) * PARAMS.n
    assert (result.steps[1].n_correct, result.steps[1].n_rollouts) == (PARAMS.n, PARAMS.n)


def test_the_hard_label_is_some_completion_right_and_the_soft_label_k_over_n(silent):
    result = rollouts.label_steps("math_shepherd", task(claims([7, 7, 8])), silent, PARAMS)
    assert [s.soft for s in result.steps] == [1.0, 1.0, 0.0]
    assert [s.n_correct > 0 for s in result.steps] == [True, True, False]
    assert result.first_error == 2


# --- OmegaPRM against the full sweep -----------------------------------------------------------------


@pytest.mark.parametrize("first_bad", [0, 3, 5, 8])
def test_omegaprm_finds_the_sweeps_first_error_on_the_same_rollouts_with_fewer(silent, first_bad):
    solution = task(claims([7] * first_bad + [9] * (8 - first_bad)))
    cache = rollouts.RolloutCache(solution, silent, PARAMS)
    sweep = rollouts.math_shepherd(solution, cache)
    search = rollouts.omegaprm(solution, cache)  # reads the sweep's rollouts: the same completions
    assert search.first_error == sweep.first_error == (first_bad if first_bad < 8 else None)
    assert search.rollouts < sweep.rollouts == search.full_sweep_rollouts == 8 * PARAMS.n
    for step in search.steps:
        if step.measured:
            assert step == sweep.steps[step.index]
        else:  # inferred: good before the error, bad from it on, with no counts
            assert step.soft == (1.0 if sweep.first_error is None or step.index < sweep.first_error else 0.0)
            assert step.n_correct is None


def test_omegaprm_alone_asks_the_generator_for_log_many_prefixes(silent):
    solution = task(claims([7] * 5 + [9] * 3))
    before = silent.usage.requests
    result = rollouts.label_steps("omegaprm", solution, silent, PARAMS)
    assert result.first_error == 5
    measured_prefixes = silent.usage.requests - before
    assert measured_prefixes == len(result.measured) <= math.ceil(math.log2(9))
    assert result.rollouts == measured_prefixes * PARAMS.n < result.full_sweep_rollouts


def test_omegaprm_on_noisy_counts_stops_at_a_good_to_bad_transition_of_the_sweep(babbler):
    solution = task(["3 + 4 = 7.", "So it is 7.", "# Answer\n\n7"])
    cache = rollouts.RolloutCache(solution, babbler, PARAMS)
    ks = [s.n_correct for s in rollouts.math_shepherd(solution, cache).steps]
    found = rollouts.omegaprm(solution, cache).first_error
    if found is None:
        assert ks[-1] > 0
    else:
        assert ks[found] == 0 and (found == 0 or ks[found - 1] > 0)


def test_an_unknown_method_or_an_empty_solution_is_refused(silent):
    with pytest.raises(ValueError, match="method='beam'"):
        rollouts.label_steps("beam", task(["x"]), silent, PARAMS)
    with pytest.raises(ValueError, match="no steps"):
        rollouts.label_steps("omegaprm", task([]), silent, PARAMS)


# --- the benchmark command ---------------------------------------------------------------------------


def test_bench_rollouts_reports_the_rate_and_omegaprms_saving_on_gsm8k_problems():
    import json

    from tests.conftest import TEST_DATA

    out = io.StringIO()
    bench.call("bench_rollouts", "--generator", "tiny", "--problems", "1", "--n", "2", "--max-tokens", "4",
                 "--data", str(TEST_DATA / "gsm8k" / "test.jsonl"), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["solutions"] == 2 and [s["kind"] for s in report["per_solution"]] == ["reference", "corrupted"]
    assert report["rollouts"] == sum(s["steps"] for s in report["per_solution"]) * 2
    assert report["omegaprm_rollouts"] == sum(s["omegaprm_rollouts"] for s in report["per_solution"])
    assert report["omegaprm_rollouts"] < report["rollouts"] and report["rollouts_per_minute"] > 0
