"""Search curves: eval_search on a tiny generator and BetaPRM, the report, and the models page.

The curve arithmetic is checked on its own (tokens at equal accuracy); the command runs
end to end on two real GSM8K test problems, and the models page shows what it wrote.
"""
import json
from xml.etree import ElementTree

import pytest
import torch
from django.core.management import call_command

from bench.tiny import build_tiny_prm
from scoring.generation.generators import Sample, SamplingParams
from scoring.search import evaluation as search_eval
from scoring.web import search_report
from tests.conftest import TEST_DATA

SVG = "{http://www.w3.org/2000/svg}"
TINY_RUN = ["--problems=2", "--ns=1,2,4", "--aca=2,2,4", "--aca-lams=0,1e6", "--max-solution-tokens=10",
            "--beams=1x2,2x2", "--beam-tokens=30", "--mcts=2,4", "--mcts-tokens=30", "--max-step-tokens=5",
            "--max-steps=3", "--threads=1"]


def test_tokens_to_reach_interpolates_between_measured_points():
    curve = [{"tokens": 100, "accuracy": 0.2}, {"tokens": 200, "accuracy": 0.4}, {"tokens": 400, "accuracy": 0.5}]
    assert search_eval.tokens_to_reach(curve, 0.1) == 100
    assert search_eval.tokens_to_reach(curve, 0.3) == pytest.approx(150)
    assert search_eval.tokens_to_reach(curve, 0.45) == pytest.approx(300)
    assert search_eval.tokens_to_reach(curve, 0.6) is None


def test_the_replay_generator_hands_out_its_samples_once_in_order():
    samples = [Sample(text=str(i), prompt_tokens=3, completion_tokens=i, finish_reason="stop") for i in range(5)]
    replay = search_eval.ReplayGenerator(samples)
    assert [s.text for s in replay.generate(["p"], SamplingParams(n=2))[0]] == ["0", "1"]
    assert [s.text for s in replay.generate(["p"], SamplingParams(n=3))[0]] == ["2", "3", "4"]
    with pytest.raises(ValueError, match="holds 5 samples"):
        replay.generate(["p"], SamplingParams(n=1))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A data dir whose reports/ holds an eval_search run on the tiny models (run once for the module)."""
    folder = tmp_path_factory.mktemp("search-eval")
    prm = build_tiny_prm(folder / "prm", head_type="beta")
    threads = torch.get_num_threads()
    try:
        call_command("eval_search", *TINY_RUN, "--prm", str(prm), "--data", str(TEST_DATA),
                     "--out", str(folder / "reports" / "search-eval.json"))
    finally:
        torch.set_num_threads(threads)
    return folder


@pytest.fixture
def tiny_report(data_dir, settings):
    settings.DATA_DIR = data_dir
    return json.loads(search_report.report_path().read_text())


def test_eval_search_reports_every_method_on_the_problems_and_draws_the_plot(tiny_report):
    curves = tiny_report["curves"]
    assert set(curves) == {"best-of-N (min)", "majority vote", "oracle (any correct)", "aca", "beam", "mcts"}
    assert [p["label"] for p in curves["best-of-N (min)"]] == ["N=1", "N=2", "N=4"]
    assert {p["label"] for p in curves["beam"]} == {"1×2", "2×2"}
    assert tiny_report["problems"] == 2 and len(tiny_report["records"]) == 2
    for record in tiny_report["records"]:
        assert len(record["candidates"]) == 4  # the pool: N_total samples, scored once
        for run in record["runs"]:
            if run["method"] in ("beam", "mcts"):
                assert run["tokens"] <= 30  # within each run's budget
    plot = ElementTree.parse(search_report.report_path().with_suffix(".svg")).getroot()
    assert plot.tag == "{http://www.w3.org/2000/svg}svg"
    assert {line.findtext(f"{SVG}title") for line in plot.iter(f"{SVG}polyline")} == set(curves)


def test_aca_that_never_stops_early_spends_exactly_fixed_best_of_n_tokens(tiny_report):
    # lam = 1e6: no candidate ever dominates, so ACA samples all N_total of the same pool.
    never = next(row for row in tiny_report["aca_savings"] if row["label"] == "λ=1e+06")
    assert never["saved_vs_fixed_n_total"] == pytest.approx(0.0)
    eager = next(row for row in tiny_report["aca_savings"] if row["label"] == "λ=0")
    assert eager["tokens"] < never["tokens"]  # lam = 0 stops at n0


def test_the_models_page_shows_the_latest_search_curves(tiny_report, client, reviewer):
    client.force_login(reviewer)
    page = client.get("/models/").content.decode()
    assert "Search curves" in page and 'class="chart"' in page and "best-of-N (min)" in page
    assert "2 gsm8k problems" in page


def test_the_models_page_says_how_to_make_search_curves_when_there_are_none(client, reviewer, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    client.force_login(reviewer)
    assert "run <code>./stepwise manage eval_search</code>" in client.get("/models/").content.decode()


@pytest.mark.parametrize("dataset, first_truth", [("gsm8k", "18"), ("math500", "\\left( 3, \\frac{\\pi}{2} \\right)")])
def test_problems_are_read_with_their_known_answers_by_the_importers_parsers(dataset, first_truth):
    from scoring.management.commands.eval_search import load_problems

    problems = load_problems(dataset, TEST_DATA, n=3, shortest=False)
    assert len(problems) == 3 and problems[0].truth == first_truth
    assert all(p.statement.strip() and p.truth for p in problems)
