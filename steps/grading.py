"""Grading an extracted final answer against the ground truth.


``grade(answer=..., truth=...)`` is True, False, or None (unknown: no ground truth, or an
answer nothing here can read in time). It never raises on odd input.

Two paths, because grading must keep up with imports of 50k solutions:

- a fast path in-process for plain numbers (``1,234``, ``40,\\!000``, ``-3.5``, ``7/8``,
  ``\\frac{7}{8}``, ``\\$18``) compared exactly with ``fractions.Fraction``: no sympy;
- everything else goes to math-verify in a child process. math-verify's own time limit
  uses ``signal.alarm``, which only works on the main thread, so both of its timeouts are
  disabled and the limit is enforced here instead: the parent waits at most ``timeout``
  seconds for the child's answer and kills the child when it is late (a sympy call stuck
  in C code cannot be interrupted any other way). This works on any thread, in web
  processes and in Celery workers alike.

Then a second opinion (``steps.normalizing``) for what math-verify leaves unknown or
rejects: decorations stripped (``\\text{}``, units, degrees, percents, dollars, thousands
separators, ``\\dfrac``, ``\\left``/``\\right``), compared as strings, as plain numbers, and by
math-verify once more. Times of day are compared as clock times before anything else,
because math-verify reads ``4:30 p.m.`` as the ratio 4/30. A solution that states no final
answer is wrong, as a person grading it would say; only a missing ground truth, or two
answers neither side can read, stay unknown. ``judge`` says which rule decided.

Results are cached by (answer, truth): pools repeat the same answers many times.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from steps import normalizing

DEFAULT_TIMEOUT = 5.0
_default_timeout = DEFAULT_TIMEOUT  # set_default_timeout: the one setting read from outside
# math-verify rounds floats to 6 places: numbers closer than this may still be equal to it.
_NEAR = Fraction(1, 10**5)

_NOISE = re.compile(r"\\[!,;: ]|\{,\}|\\\$|\$|\\text\{\s*\}|\s+")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")
_SLASH = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")
_FRAC = re.compile(r"^([+-]?)\\[dt]?frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")


NO_ANSWER = "no final answer found in the solution"
NO_TRUTH = "the problem has no ground-truth answer"
UNDECIDED = "math-verify could not decide (unreadable or too slow)"


class Grade(NamedTuple):
    """A grade and, when a person checking the pool should know, how it was reached."""

    is_correct: bool | None
    note: str = ""  # empty for the ordinary paths (plain numbers, math-verify)


def grade(*, answer: str | None, truth: str | None, timeout: float | None = None) -> bool | None:
    """Whether `answer` equals `truth` mathematically; None when that cannot be decided."""
    return judge(answer=answer, truth=truth, timeout=timeout).is_correct


def judge(*, answer: str | None, truth: str | None, timeout: float | None = None) -> Grade:
    """The grade of `answer` against `truth`, with the reason when it is not plain."""
    if not truth or not truth.strip():
        return Grade(None, NO_TRUTH)
    if not answer or not answer.strip():
        return Grade(False, NO_ANSWER)
    return _judge_cached(answer.strip(), truth.strip(), _timeout(timeout))


def set_default_timeout(seconds: float) -> None:
    """The timeout of a grade that names none: the app sets STEPWISE_GRADING_TIMEOUT at start."""
    global _default_timeout
    _default_timeout = float(seconds)


def _timeout(timeout: float | None) -> float:
    return _default_timeout if timeout is None else timeout


@lru_cache(maxsize=200_000)
def _judge_cached(answer: str, truth: str, timeout: float) -> Grade:
    a, t = normalizing.time_of_day(answer), normalizing.time_of_day(truth)
    if (a and a.meridiem) or (t and t.meridiem):  # only then is 4:30 a time, not a ratio
        return Grade(a is not None and t is not None and normalizing.same_time(a, t), "compared as times of day")
    fast = grade_fast(answer, truth)
    if fast is not None:
        return Grade(fast)
    first = _WORKER.verify(answer, truth, timeout)
    if first is True:
        return Grade(True)
    return _second_opinion(answer, truth, first, timeout)


def _second_opinion(answer: str, truth: str, first: bool | None, timeout: float) -> Grade:
    """Normalized comparison for what math-verify rejected (`first` False) or left unknown."""
    a, t = normalizing.normalize(answer), normalizing.normalize(truth)
    if not a or not t:
        return Grade(first, "" if first is False else UNDECIDED)
    if a == t:
        return Grade(True, "equal after normalization" + (" (math-verify said no)" if first is False else ""))
    fast = grade_fast(a, t)
    if fast is not None:
        return Grade(fast, "compared as numbers after normalization" if fast or first is None else "")
    second = _WORKER.verify(a, t, timeout) if (a, t) != (answer, truth) else None
    if second is True:
        return Grade(True, "math-verify after normalization")
    if first is False or second is False:
        return Grade(False)
    if normalizing.is_words(a) or normalizing.is_words(t):
        # "Monday" against "Tuesday", or "no solution" against 5: a person says wrong.
        return Grade(False, "different words after normalization")
    return Grade(None, UNDECIDED)


def clear_cache() -> None:
    """Forget cached results (benchmarks measure grading from scratch)."""
    _judge_cached.cache_clear()


def grade_fast(answer: str, truth: str) -> bool | None:
    """The answer for plain numbers and identical strings, without sympy; None otherwise."""
    a, t = _NOISE.sub("", answer), _NOISE.sub("", truth)
    if a == t:
        return True
    x, y = as_number(a), as_number(t)
    if x is None or y is None:
        return None
    if x == y:
        return True
    # Far apart: no rounding can make them equal. Close but unequal: let math-verify decide.
    return False if abs(x - y) > _NEAR * max(Fraction(1), abs(y)) else None


def as_number(text: str) -> Fraction | None:
    """`text` as an exact number when it is a plain one (integer, decimal, a/b, \\frac{a}{b})."""
    text = _NOISE.sub("", text)
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        if _DECIMAL.match(text):
            return Fraction(Decimal(text))
        if match := _SLASH.match(text):
            return Fraction(int(match[1]), int(match[2]))
        if match := _FRAC.match(text):
            value = Fraction(int(match[2]), int(match[3]))
            return -value if match[1] == "-" else value
    except (InvalidOperation, ZeroDivisionError, ValueError):
        return None
    return None


class _VerifierProcess:
    """One math-verify child process per parent process, restarted after a timeout."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def verify(self, answer: str, truth: str, timeout: float) -> bool | None:
        with self._lock:
            try:
                process = self._running()
                assert process.stdin and process.stdout
                process.stdin.write(json.dumps([answer, truth]) + "\n")
                process.stdin.flush()
                ready, _, _ = select.select([process.stdout], [], [], timeout)
                if not ready:
                    self._stop()
                    return None
                reply = process.stdout.readline()
                if not reply:
                    self._stop()
                    return None
                result: bool | None = json.loads(reply)
                return result
            except (OSError, ValueError):
                self._stop()
                return None

    def _running(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from steps.grading import serve; serve()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1, env=env, start_new_session=True,
            )
            stdout = self._process.stdout
            assert stdout is not None  # stdout=PIPE
            # Wait for the imports, so their cost never counts against an answer's limit.
            ready, _, _ = select.select([stdout], [], [], 60)
            if not ready or stdout.readline().strip() != "ready":
                self._stop()
                raise OSError("math-verify process did not start")
        return self._process

    def _stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        with self._lock:
            self._stop()


_WORKER = _VerifierProcess()
atexit.register(_WORKER.close)


def serve() -> None:
    """The child's loop: read ``[answer, truth]`` lines, write true/false/null lines."""
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    # math_verify: sympy and an ANTLR parser, loaded in this child only (imported before "ready").
    from math_verify import parse, verify  # noqa: F401

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            answer, truth = json.loads(line)
            result = _verify_with_math_verify(answer, truth)
        except Exception:
            result = None
        print(json.dumps(result), flush=True)


def _verify_with_math_verify(answer: str, truth: str) -> bool | None:
    from math_verify import parse, verify  # math_verify: sympy, in the verifier child only

    gold = parse(f"\\boxed{{{truth}}}", parsing_timeout=None)
    pred = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not gold or not pred:
        return None
    if verify(gold, pred, timeout_seconds=None):
        return True
    # Only strings came back (sympy could not read one side): that is not a "no".
    if all(isinstance(x, str) for x in gold) or all(isinstance(x, str) for x in pred):
        return None
    return False
