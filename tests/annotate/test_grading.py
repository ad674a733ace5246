"""Grading extracted answers against the ground truth."""
import threading
import time

import pytest

from annotate.grading import as_number, grade, grade_fast

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
    # nothing to grade
    (None, "5", None),
    ("", "5", None),
    ("5", None, None),
    ("   ", "5", None),
]


@pytest.mark.parametrize(("answer", "truth", "expected"), GRADING_CASES)
def test_answers_are_graded_like_a_mathematician_would(answer, truth, expected):
    assert grade(answer=answer, truth=truth) is expected


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
