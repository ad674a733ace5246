"""PRM-guided search on a real local generator (the tiny Llama) and a real tiny BetaPRM.

Budgets are what the methods are for: whatever the method and its options, the generated
tokens and PRM calls it spends never pass the budget, and the count it reports is what
the generator really wrote.
"""
import io

import pytest
import torch

from bench.tiny import build_tiny_backbone, build_tiny_prm
from scoring import search
from scoring.core.prm import StepProbability, load_prm
from scoring.generation.generators import LocalGenerator, SamplingParams
from steps.answers import extract_answer

PROBLEM = "What is 12 + 7?"
OPTIONS = search.StepOptions(max_step_tokens=6, max_steps=3, seed=0)
METHOD_OPTIONS = {
    "best_of_n": {"n": 4, "max_solution_tokens": 12},
    "beam": {"beam_width": 2, "expansions": 2},
    "beam_lookahead": {"beam_width": 2, "expansions": 2, "lookahead": 1},
    "mcts": {"simulations": 8, "expansion_width": 2},
    "aca": {"n0": 2, "n_total": 6, "m": 2, "lam": 1e6, "max_solution_tokens": 12},
}


@pytest.fixture(scope="module")
def one_thread():
    # Models this small spend their time in thread hand-offs: one thread is ~20x faster on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, one_thread):
    folder = tmp_path_factory.mktemp("search")
    generator = LocalGenerator(build_tiny_backbone(folder / "generator", seed=1), device="cpu", dtype=torch.float32)
    prm = load_prm(build_tiny_prm(folder / "prm", head_type="beta"), device="cpu", dtype=torch.float32)
    return generator, search.prm_scorer(prm)


def run(tiny, name, budget, **overrides):
    generator, scorer = tiny
    method = "beam" if name == "beam_lookahead" else name
    return search.run(method=method, problem=PROBLEM, generator=generator, scorer=scorer, budget=budget,
                      options=OPTIONS, **{**METHOD_OPTIONS[name], **overrides})


@pytest.mark.parametrize("name", list(METHOD_OPTIONS))
def test_no_method_generates_more_tokens_than_its_budget(tiny, name):
    generator, _ = tiny
    before = generator.usage.completion_tokens
    result = run(tiny, name, search.Budget(max_tokens=20))
    spent = result.compute["generated_tokens"]
    assert result.stopped == "budget" and 0 < spent <= 20
    assert spent == generator.usage.completion_tokens - before  # the account is what was really written


@pytest.mark.parametrize("name", list(METHOD_OPTIONS))
def test_no_method_calls_the_prm_more_often_than_its_budget(tiny, name):
    result = run(tiny, name, search.Budget(max_prm_calls=3))
    assert result.stopped == "budget" and result.compute["prm_calls"] == 3


@pytest.mark.parametrize("name", list(METHOD_OPTIONS))
def test_every_method_returns_a_scored_solution_with_its_answer_and_compute(tiny, name):
    result = run(tiny, name, search.Budget(max_tokens=400, max_prm_calls=40)).as_dict()
    solution = result["solution"]
    assert solution["steps"] and len(solution["scores"]) == len(solution["steps"])
    assert solution["answer"] == extract_answer("\n\n".join(solution["steps"]))
    assert all(0 <= s["p"] <= 1 and s["sigma"] > 0 for s in solution["scores"])
    assert 0 < result["compute"]["generated_tokens"] <= 400 and 0 < result["compute"]["prm_calls"] <= 40


def test_beam_width_one_without_lookahead_is_greedy_by_prm_score(tiny):
    generator, scorer = tiny
    expansions = 3
    result = search.beam_search(problem=PROBLEM, generator=generator, scorer=scorer, beam_width=1,
                                expansions=expansions, aggregation="min", options=OPTIONS)
    # Greedy by hand: sample `expansions` next steps with the seed the search uses, keep the best-scored.
    steps: list[str] = []
    for round_index in range(OPTIONS.max_steps):
        params = SamplingParams(temperature=OPTIONS.temperature, top_p=OPTIONS.top_p, stop=("\n\n",),
                                max_tokens=OPTIONS.max_step_tokens, n=expansions, seed=OPTIONS.seed + round_index)
        texts = [s.text.strip() for s in generator.generate([OPTIONS.prompt(PROBLEM, steps)], params)[0]]
        values = [min(p.p for p in scorer(PROBLEM, [*steps, t])) if t else float("-inf") for t in texts]
        best = texts[values.index(max(values))]
        if not best:
            break
        steps.append(best)
        if extract_answer("\n\n".join(steps)) is not None:
            break
    assert list(result.best.steps) == steps
    assert all(len(row) == expansions for row in result.details["rounds"])


def beta(mu: float, sigma: float) -> StepProbability:
    return StepProbability(p=mu, mean=mu, sigma=sigma)


def test_aca_stops_when_the_best_lower_bound_beats_every_other_upper_bound():
    clear_winner = [[beta(0.9, 0.02), beta(0.85, 0.02)], [beta(0.4, 0.05)], [beta(0.6, 0.05), beta(0.3, 0.1)]]
    assert search.aca_should_stop(clear_winner, aggregation="min", lam=1.0)
    # Two candidates whose intervals overlap: more samples could change the pick.
    close = [[beta(0.80, 0.1)], [beta(0.75, 0.1)]]
    assert not search.aca_should_stop(close, aggregation="min", lam=1.0)
    assert search.aca_should_stop(close, aggregation="min", lam=0.1)


def test_aca_refuses_scores_without_sigma():
    with pytest.raises(ValueError, match="beta head"):
        search.aca_should_stop([[StepProbability(p=0.9)], [StepProbability(p=0.1)]])


def test_aca_stops_at_n0_when_one_candidate_dominates(tiny):
    # lam = 0: the bounds are the means, so distinct scores dominate after the first n0 samples.
    result = run(tiny, "aca", search.Budget(max_tokens=400), lam=0.0)
    assert result.details["n"] == 2 and result.details["early_stop"] and result.stopped == "done"
    assert result.compute["samples"] == 2


def test_aca_uses_all_n_total_samples_when_none_dominates(tiny):
    result = run(tiny, "aca", search.Budget(max_tokens=400), lam=1e6)
    assert result.details["n"] == 6 and not result.details["early_stop"]
    assert [r["samples"] for r in result.details["rounds"]] == [2, 4, 6]


@pytest.mark.parametrize("method, options, message", [
    ("beam", {"beam_width": 0}, "beam_width"),
    ("beam", {"lookahead": 2}, "lookahead"),
    ("mcts", {"simulations": 0}, "simulations"),
    ("aca", {"n0": 8, "n_total": 4}, "n0"),
    ("best_of_n", {"aggregation": "median"}, "aggregation"),
    ("sampling", {}, "unknown search method"),
])
def test_bad_options_are_refused_by_name(tiny, method, options, message):
    generator, scorer = tiny
    with pytest.raises(ValueError, match=message):
        search.run(method=method, problem=PROBLEM, generator=generator, scorer=scorer, **options)


def test_a_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        search.Budget(max_tokens=0)


def test_the_search_command_runs_a_search_with_the_current_model_and_prints_its_compute(db, tmp_path, settings,
                                                                                       one_thread):
    import json

    from django.core.management import call_command

    from scoring.store import registry

    registry.register_model_version(name="tiny-beta", path=build_tiny_prm(tmp_path / "beta", head_type="beta"),
                                    make_current=True)
    out = io.StringIO()
    call_command("search", PROBLEM, "--method", "mcts", "--max-tokens", "20", "--option", "simulations=3",
                 "--option", "max_step_tokens=5", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["model"] == "tiny-beta" and result["method"] == "mcts"
    assert result["compute"]["generated_tokens"] <= 20 and result["solution"]["steps"]


def test_the_search_command_generates_with_the_local_folder_it_is_given(db, tmp_path, tiny_causal_lm, one_thread):
    import json

    from django.core.management import call_command

    from scoring.store import registry

    registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    out = io.StringIO()
    call_command("search", PROBLEM, "--method", "best_of_n", "--max-tokens", "12", "--generator", str(tiny_causal_lm),
                 "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["generator"] == f"local:{tiny_causal_lm.name}"


def test_the_search_command_names_an_option_the_method_does_not_take(db, tmp_path):
    from django.core.management import CommandError, call_command

    from scoring.store import registry

    registry.register_model_version(name="tiny", path=build_tiny_prm(tmp_path / "tiny"), make_current=True)
    with pytest.raises(CommandError, match="beam_width"):
        call_command("search", PROBLEM, "--method", "aca", "--max-tokens", "20", "--option", "beam_width=2")
