"""The assisted-labeling benchmark: what blind, second look and suggest catch and cost on gold items."""
import io
import json

import pytest
from django.core.management import CommandError

import bench
from bench import learnable_domain, simulation_assistance
from bench.simulation_assistance import Annotator, GoldTask


def gold(problems: int = 150, *, ps_of) -> list[GoldTask]:
    solutions = [s for p in learnable_domain.make_problems(problems, variants=3, seed=5) for s in p.solutions]
    return [GoldTask(s.first_error, ps_of(s)) for s in solutions]


def oracle(solution) -> list[float]:
    return [0.05 if i == solution.first_error else 0.95 for i in range(len(solution.steps))]


def test_blind_catches_nothing_and_a_second_look_with_an_informative_model_catches_misses():
    measured = simulation_assistance.measure(gold(ps_of=oracle), Annotator(), seed=1)
    blind, second, suggest = (measured["modes"][mode] for mode in ("blind", "second_look", "suggest"))
    assert measured["blind_misses"] > 20
    assert blind["misses_caught"] == 0 and blind["extra_seconds_per_task"] == 0 and blind["looks_per_task"] == 0
    # Recovery is 0.6 per look and the oracle doubts every miss: about 60 % of misses come back.
    assert 0.4 < second["misses_caught"] < 0.8 and second["looks_per_task"] > 0
    assert second["first_error_accuracy"] > blind["first_error_accuracy"]
    assert suggest["misses_caught"] > 0.4 and suggest["extra_seconds_per_task"] > 0


def test_an_uninformative_model_never_asks_and_changes_nothing():
    measured = simulation_assistance.measure(gold(ps_of=lambda s: [0.5] * len(s.steps)), Annotator(), seed=1)
    blind, second = measured["modes"]["blind"], measured["modes"]["second_look"]
    assert second["misses_caught"] == 0 and second["looks_per_task"] == 0 and second["extra_seconds_per_task"] == 0
    assert second["false_alarms_per_task"] == blind["false_alarms_per_task"]


def test_a_flawless_annotator_misses_nothing_whatever_the_mode():
    person = Annotator(miss=0, false_alarm=0, talked_out=0, anchor=0)
    measured = simulation_assistance.measure(gold(ps_of=oracle), person)
    assert measured["blind_misses"] == 0
    assert all(m["first_error_accuracy"] == 1 and m["false_alarms_per_task"] == 0 for m in measured["modes"].values())


def test_the_command_measures_a_trained_scorer_per_mode():
    out = io.StringIO()
    bench.call("simulate_assistance", "--problems", "120", "--train-problems", "500", "--labels", "800",
               "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert set(result["scorers"]) == {"uninformative (p = 0.5)", "oracle", "MLP on 800 labels"}
    trained = result["scorers"]["MLP on 800 labels"]
    assert set(trained["modes"]) == {"blind", "second_look", "suggest"}
    assert trained["model"]["step_auc"] > 0.55  # it learned something from 800 labels
    assert trained["modes"]["second_look"]["misses_caught"] > 0


def test_a_probability_out_of_range_is_named():
    with pytest.raises(CommandError, match="recover"):
        bench.call("simulate_assistance", "--recover", "1.5")
