"""Grading extracted answers against the ground truth."""
import json
import threading
import time

import pytest

import bench
from steps.answers import extract_answer
from steps.grading import NO_ANSWER, NO_TRUTH, as_number, grade, grade_fast, judge
from steps.normalizing import normalize, time_of_day
from tests.conftest import TEST_DATA

GRADING_CASES = [
    # numbers with thousands separators, LaTeX thin spaces, dollars
    ("40000", "40,\\!000", True),
    ("320,000", "40,\\!000", False),
    ("1,080", "1080", True),
    ("\\$18", "18", True),
    ("18.00", "18", True),
    ("-3", "3", False),
    # fractions against decimals
    ("0.5", "\\frac{1}{2}", True),
    ("\\dfrac{3}{4}", "0.75", True),
    ("7/8", "\\frac{7}{8}", True),
    ("0.333333", "\\frac{1}{3}", True),
    ("0.33", "\\frac{1}{3}", False),
    # LaTeX expressions
    ("\\frac{\\sqrt{2}}{2}", "\\frac{\\sqrt2}{2}", True),
    ("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("2\\pi", "\\pi", False),
    ("x=5", "5", True),
    ("10\\%", "10", True),
    ("\\text{Monday}", "Monday", True),
    # tuples and intervals
    ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    ("(2, 1)", "(1, 2)", False),
    ("[1,2)", "[1,2)", True),
    ("(1,2]", "[1,2)", False),
    ("(-\\infty, 3]", "(-\\infty,3]", True),
    # no final answer: wrong, as a person grading it would say; no truth: unknown
    (None, "5", False),
    ("", "5", False),
    ("   ", "5", False),
    ("5", None, None),
    ("5", "  ", None),
]

# Real answer styles: Qwen2.5-Math's extracted answers against MATH's `answer` key, with the
# published correctness (tests/data/model-responses), then the decorations the PRM800K
# grader's normalization handles, in the forms MATH and GSM8K answers take.
REAL_STYLE_CASES = [
    ("\\frac{1}{9}", "\\dfrac{1}{9}", True),
    ("\\frac{5}{16}", "\\frac{3}{8}", False),
    ("6", "\\$6", True),
    ("1 \\frac{1}{4}", "1\\frac{1}{4}", True),
    ("C", "A", False),
    ("\\frac{16}{81}", "\\frac{16}{81}", True),
    # \text{} and letter choices
    ("\\text{(C)}", "C", True),
    ("(C)", "\\text{(C)}", True),
    ("\\textbf{(A)}", "A", True),
    ("C", "\\text{(B)}", False),
    ("\\mbox{Tuesday}", "\\text{Tuesday}", True),
    ("\\text{east}", "\\text{East}", True),
    ("\\text{Sunday}", "\\text{Monday}", False),
    ("\\text{no solution}", "5", False),
    ("two", "2", True),
    # units, as words or in \text{}
    ("5\\text{ cm}", "5", True),
    ("5 \\text{ cm}^2", "5", True),
    ("12 inches", "12", True),
    ("17\\text{ sq. units}", "17", True),
    ("\\frac{3}{4}\\text{ of the pie}", "\\frac34", True),
    ("2\\frac{1}{4}\\text{ feet}", "\\frac94", True),
    ("18 dollars", "18", True),
    ("1,080 cookies", "1080", True),
    ("12 hours", "13", False),
    # dollars, percents, degrees
    ("\\$32.00", "32", True),
    ("1.5", "\\$1.50", True),
    ("0.5\\%", "0.5", True),
    ("5%", "5", True),
    ("30^\\circ", "30", True),
    ("30^{\\circ}", "30", True),
    ("30 degrees", "30", True),
    ("31^\\circ", "30", False),
    # \dfrac, \tfrac, thousands separators, \left / \right, spaces
    ("\\tfrac{1}{9}", "\\frac{1}{9}", True),
    ("1{,}000", "1000", True),
    ("10,000,000", "10000000", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),
    ("3\\sqrt{2}", "3 \\sqrt2", True),
    ("x \\in [-2,7]", "[-2,7]", True),
    ("2\\text{ and }3", "2, 3", True),
    ("6 - 5i.", "6 - 5i", True),  # math-verify rejects a trailing full stop
    ("y = 2x + 3.", "y = 2x + 3", True),
    # what normalization must not make equal
    ("2 x", "2", False),
    ("(2,12) \\cup (12102)", "(2,12) \\cup (12,102)", False),
    ("5\\text{ cm}", "6\\text{ cm}", False),
]

# math-verify reads "4:30 p.m." as the ratio 4/30: times of day are compared as times.
TIME_CASES = [
    ("4:30 p.m.", "4:30\\text{ p.m.}", True),
    ("\\text{4:30 PM}", "4:30 p.m.", True),
    ("16:30", "4:30 p.m.", True),
    ("4:30", "4:30\\text{ p.m.}", True),  # the question already says afternoon or morning
    ("4:30 a.m.", "4:30\\text{ p.m.}", False),
    ("8:30 p.m.", "8:30 a.m.", False),
    ("2/15", "4:30\\text{ p.m.}", False),  # 4/30 as a fraction is not a time
    ("\\frac{2}{15}", "4:30 p.m.", False),
    ("p.m.", "4:30 p.m.", False),
    ("2:3", "2:3", True),  # no a.m. or p.m.: a ratio, left to math-verify
]


@pytest.mark.parametrize(("answer", "truth", "expected"), GRADING_CASES)
def test_answers_are_graded_like_a_mathematician_would(answer, truth, expected):
    assert grade(answer=answer, truth=truth) is expected


@pytest.mark.parametrize(("answer", "truth", "expected"), REAL_STYLE_CASES)
def test_real_answer_styles_get_the_grade_a_person_gives(answer, truth, expected):
    assert grade(answer=answer, truth=truth) is expected
    assert grade(answer=truth, truth=answer) is expected  # the rule is symmetric


@pytest.mark.parametrize(("answer", "truth", "expected"), TIME_CASES)
def test_times_of_day_are_compared_as_times_not_ratios(answer, truth, expected):
    assert grade(answer=answer, truth=truth) is expected


def test_a_solution_with_no_final_answer_is_wrong_with_the_reason_recorded():
    assert judge(answer=None, truth="72") == (False, NO_ANSWER)
    assert judge(answer="72", truth=None) == (None, NO_TRUTH)


def test_the_second_opinion_says_why_it_overrode_math_verify():
    assert judge(answer="18 dollars", truth="18").note == "equal after normalization (math-verify said no)"
    assert judge(answer="4:30 p.m.", truth="16:30").note == "compared as times of day"
    assert judge(answer="\\frac{1}{2}", truth="0.5").note == ""  # plain paths leave no note


def test_normalization_strips_decorations_and_keeps_the_mathematics():
    assert normalize("\\left( 3, \\dfrac{\\pi}{2} \\right).") == "(3,\\frac{\\pi}{2})"
    assert normalize("40,\\!000\\text{ dollars}") == "40000"
    assert normalize("x + y") == "x+y"  # trailing letters of an expression are not units
    assert normalize("2\\pi") == "2\\pi"
    assert normalize("(1,2)") == "(1,2)"  # a pair, not one thousand two hundred
    assert normalize("(2,12) \\cup (12,102)") == "(2,12)\\cup(12,102)"
    assert time_of_day("4:30\\text{ p.m.}") == (16, 30, True)
    assert time_of_day("4:30") == (4, 30, False)
    assert time_of_day("13:30 p.m.") is None


def test_real_model_responses_agree_with_their_published_correctness():
    """All 160 Qwen2.5-Math responses, against both keys the publisher gives (answer, gt)."""
    path = TEST_DATA / "model-responses" / "math_qwen25_cot_20x8.jsonl"
    disagreements = []
    for problem in map(json.loads, path.open()):
        for response, published in zip(problem["response"], problem["score"], strict=True):
            answer = extract_answer(response)
            for key in ("answer", "gt"):
                if grade(answer=answer, truth=problem[key]) is not published:
                    disagreements.append((answer, problem[key], published))
    assert disagreements == []


def test_plain_numbers_never_need_sympy():
    assert grade_fast("40,\\!000", "40000") is True
    assert grade_fast("12", "13") is False
    assert grade_fast("x+1", "1+x") is None  # not a number: math-verify decides
    assert as_number("-\\frac{3}{4}") == as_number("-0.75")
    assert as_number("1,2") is None  # a list, not one thousand two hundred


def test_numbers_too_close_to_call_exactly_go_to_math_verify():
    assert grade_fast("0.3333333", "1/3") is None


@pytest.mark.parametrize("answer", ["\\frac{1}{0}", "}{", "\\boxed{", "((((((", "\\begin{pmatrix}"])
def test_garbage_never_raises(answer):
    assert grade(answer=answer, truth="5") in (True, False, None)


def test_grading_off_the_main_thread_respects_the_time_limit():
    """math-verify's own limit (signal.alarm) fails off the main thread; ours must not."""
    results = []
    # A tower of powers sympy would work on for a very long time.
    tower = "2^{2^{2^{2^{2^{2^{30}}}}}}"
    thread = threading.Thread(target=lambda: results.append(grade(answer=tower, truth="7", timeout=1.0)))
    started = time.monotonic()
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert results == [None]
    assert time.monotonic() - started < 10
    # The grader recovers after a timeout.
    assert grade(answer="x+1", truth="1+x", timeout=5.0) is True


def test_grading_works_from_worker_threads():
    results = {}

    def work(i):
        results[i] = grade(answer=f"\\frac{{{2 * i}}}{{4}}", truth=f"{i}/2+0*x")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {1: True, 2: True, 3: True, 4: True}


def test_bench_grading_prints_agreement_on_real_responses_and_references():
    from io import StringIO


    out = StringIO()
    bench.call("bench_grading", data=TEST_DATA, lines=30, stdout=out)
    lines = [line for line in out.getvalue().splitlines() if not line.startswith("    ")]
    assert lines[0].startswith("math_qwen25_cot_20x8.jsonl vs answer: 160/160 agree (100.00 %)")
    assert len(lines) == 9 and all(", 0 disagree, 0 unknown," in line for line in lines)


@pytest.mark.django_db
def test_imported_solutions_keep_the_grade_and_the_reason_a_person_checking_needs(tmp_path):
    from annotate.models import Solution
    from annotate.pool import importing

    lines = [
        {"problem": "When does the train arrive?", "ground_truth_answer": "4:30\\text{ p.m.}",
         "steps": ["It leaves at 2:00 p.m. and takes 2.5 hours.", "The answer is 4:30 p.m."]},
        {"problem": "How much does she pay?", "ground_truth_answer": "18",
         "steps": ["3 times 6 is 18.", "The answer is 18 dollars."]},
        {"problem": "How many eggs are left?", "ground_truth_answer": "9",
         "steps": ["She had 16 eggs and ate 3, so"]},  # a generation cut off before its answer
    ]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    importing.import_pool(path=path)
    graded = {s.problem.ground_truth_answer: (s.is_correct, s.grading_note)
              for s in Solution.objects.select_related("problem")}
    assert graded == {
        "4:30\\text{ p.m.}": (True, "compared as times of day"),
        "18": (True, "equal after normalization (math-verify said no)"),
        "9": (False, NO_ANSWER),
    }
