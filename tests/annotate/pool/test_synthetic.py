"""The project's own problem generator: known answers and known first errors."""
import re

from annotate.pool.synthetic import generic_lines, make_pool


def _claimed_results(steps):
    return [re.search(r"(\d+) ([-+*/]) (\d+) = (-?\d+)", step).groups() for step in steps[:-1]]


def test_correct_solutions_compute_every_step_right_and_reach_the_answer():
    for problem in make_pool(n_problems=50, seed=3):
        for a, op, b, c in _claimed_results(problem.correct.steps):
            assert eval(f"{a} {op.replace('/', '//')} {b}") == int(c)
        assert problem.correct.steps[-1] == f"# Answer\n\n{problem.answer}"
        assert problem.correct.first_error is None


def test_a_corrupted_variant_is_wrong_first_at_its_first_error_and_ends_wrong():
    variants = [v for p in make_pool(n_problems=50, seed=4) for v in p.variants]
    assert variants
    for variant in variants:
        checks = [eval(f"{a} {op.replace('/', '//')} {b}") == int(c) for a, op, b, c in _claimed_results(variant.steps)]
        assert checks.index(False) == variant.first_error
    assert {v.corruption for v in variants} >= {"arithmetic_slip", "wrong_operation", "off_by_one"}


def test_generic_lines_keep_the_first_error_and_the_ground_truth():
    problems = make_pool(n_problems=5, seed=5)
    lines = generic_lines(problems)
    assert len(lines) == sum(1 + len(p.variants) for p in problems)
    first = lines[0]
    assert first["ground_truth_answer"] == str(problems[0].answer)
    assert first["meta"]["first_error"] is None
    assert all(set(line) >= {"problem", "ground_truth_answer", "steps"} for line in lines)


def test_the_same_seed_gives_the_same_pool():
    assert generic_lines(make_pool(n_problems=10, seed=9)) == generic_lines(make_pool(n_problems=10, seed=9))
