"""bench_judge in its quick form (the tiny model, three real responses, a few tokens): the plumbing, not
the judge's quality. Every answer is stored and counted, parsed or not; the scripted judge's verdicts
are shown by the reader and the API alike and every export reads back with them."""
import io
import json

import pytest

import bench
from bench import judge_plumbing


@pytest.mark.slow  # two server processes, three model loads: about half a minute
@pytest.mark.django_db
def test_every_judge_stores_an_answer_per_solution_and_the_scripted_ones_reach_every_export(tiny_causal_lm,
                                                                                           one_torch_thread):
    out = io.StringIO()
    bench.call("bench_judge", "--model", str(tiny_causal_lm), "--limit", "3", "--max-tokens", "4", "--in-place",
               "--json", stdout=out)
    reports = json.loads(out.getvalue())
    assert [(r["judge"], r["template"]) for r in reports] == [
        ("local", "default"), ("server (chat)", "default"), ("server (chat)", "judge_by_example.txt"),
        ("scripted", "default")]
    for report in reports:
        assert report["state"] == "succeeded" and report["answers"] == report["solutions"] == 3
        assert report["parsed"] + sum(report["reasons"].values()) == 3 == report["parsed"] + report["unparseable"]
    # The job asks for logprobs: the local model and the stand-in server both give them.
    assert [r["answers_with_logprobs"] for r in reports[:3]] == [3, 3, 3]
    scripted = reports[-1]
    # Served in turn: in the form with logprobs (2 verdicts), in the form without (1), in no form.
    assert scripted["parsed"] == 2 and scripted["reasons"] == {"no verdicts": 1}
    assert scripted["verdicts"] == 3 and scripted["verdicts_from_logprobs"] == 2
    assert scripted["answers_with_logprobs"] == 1
    shown = scripted["shown"]
    assert shown["shown"] == shown["stored"] == 2 and shown["with_critique"] == 2
    assert shown["reader_matches"] and shown["api_matches"]
    assert scripted["exports"] == {name: {"rows": 2, "steps": 3} for name in judge_plumbing.EXPORT_FORMATS}
    assert scripted["agreement"]["n"] == 2


def test_a_small_sample_of_real_responses_holds_wrong_and_right_answers():
    lines = judge_plumbing.pool_lines(limit=4)
    assert [line["meta"]["score"] for line in lines] == [False, True, False, True]
    every = judge_plumbing.pool_lines(limit=160)
    assert len({(line["meta"]["line"], line["meta"]["response"]) for line in every}) == 160


def test_the_scripted_logprobs_rebuild_their_answer_and_favour_the_written_verdict():
    first = judge_plumbing.scripted_answers()[0]
    assert "".join(token for token, _, _ in first["logprobs"]) == first["text"]
    verdicts = [(token, top) for token, _, top in first["logprobs"] if top]
    assert [token for token, _ in verdicts] == ["correct", "incorrect"]
    assert all(top[token] > max(lp for alt, lp in top.items() if alt != token) for token, top in verdicts)
