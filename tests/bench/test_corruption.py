"""Corrupted GSM8K solutions: one wrong step, carried through to a wrong final answer."""
import json
import random
import re

import pytest

from bench.corruption import CALCULATION, corrupt, gsm8k_steps
from tests.conftest import TEST_DATA

NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
           "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


def _calculations_hold(step: str) -> bool:
    return all(abs(eval(expr) - float(result)) < 1e-3 for expr, result in CALCULATION.findall(step))


def test_gsm8k_reference_splits_into_step_lines_and_final_answer():
    steps, answer = gsm8k_steps(NATALIA)
    assert steps == ["Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
                     "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May."]
    assert answer == "72"


def test_a_slip_in_the_first_step_carries_into_later_steps_and_the_answer():
    steps, answer = gsm8k_steps(NATALIA)
    bad = corrupt(steps, answer, random.Random(0), kind="off_by_one")
    assert bad is not None
    assert bad.answer != "72"
    if bad.first_error == 0:
        wrong = re.search(r"=(\d+)>>", bad.steps[0]).group(1)
        assert f"48+{wrong}" in bad.steps[1]
    # Later steps recompute from the wrong value, so their own arithmetic is consistent.
    assert all(_calculations_hold(step) for step in bad.steps[bad.first_error + 1:])


def test_wrong_operation_shows_the_swapped_operator_in_the_visible_text():
    steps = ["Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.",
             "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10."]
    bad = corrupt(steps, "10", random.Random(1), kind="wrong_operation")
    assert bad is not None
    changed = bad.steps[bad.first_error]
    visible, annotation = changed.split("<<")
    op = re.search(r"[+\-*/]", annotation[1:]).group(0)
    shown = {"*": ("*", "x")}.get(op, (op,))
    assert any(symbol in visible for symbol in shown)
    assert visible != steps[bad.first_error].split("<<")[0]


@pytest.mark.slow
def test_most_real_gsm8k_solutions_yield_a_wrong_variant_whose_steps_before_the_error_are_untouched():
    lines = [json.loads(line) for line in open(TEST_DATA / "gsm8k" / "test.jsonl")]
    rng, made = random.Random(7), 0
    for line in lines:
        steps, answer = gsm8k_steps(line["answer"])
        bad = corrupt(steps, answer, rng, question=line["question"])
        if bad is None:
            continue
        made += 1
        assert bad.steps[:bad.first_error] == steps[:bad.first_error]
        assert bad.steps[bad.first_error] != steps[bad.first_error]
        assert float(bad.answer) != float(answer.replace(",", ""))
    assert made > 0.8 * len(lines)
