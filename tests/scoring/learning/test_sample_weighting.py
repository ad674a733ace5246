"""The promotion gate's best-of-N counts a solution's samples, as evaluation does."""
from types import SimpleNamespace

import pytest

from annotate.models import Project
from scoring.learning import promotion
from tests.factories import ProblemFactory, SolutionFactory

pytestmark = pytest.mark.django_db


def test_a_problem_whose_samples_are_one_repeated_solution_is_held_out_for_best_of_n():
    once = SolutionFactory(problem=ProblemFactory(), is_correct=True)
    repeated = SolutionFactory(problem=ProblemFactory(), is_correct=False, sample_count=3)
    data = promotion.eval_set(project=Project.objects.sole(), examples=[], trained_on=set(), val_fraction=1.0,
                              seed=0, max_problems=10, max_candidates=8)
    chosen = [solution.pk for candidates in data.bon for solution, _ in candidates]
    assert chosen == [repeated.pk]  # one distinct solution, but three samples: a vote to count
    assert once.pk not in chosen


def test_a_candidate_of_the_gate_carries_its_sample_count():
    solution = SolutionFactory(sample_count=4, final_answer=" 7 ")
    probs = [SimpleNamespace(p=0.8, sigma=None), SimpleNamespace(p=0.6, sigma=None)]
    candidate = promotion._candidate(solution, probs)
    assert (candidate.count, candidate.answer, candidate.mu) == (4, "7", [0.8, 0.6])
