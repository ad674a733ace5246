"""./stepwise bench bench_grading [--data tests/data] [--lines N] [--show N]

Grades real data from scratch (cache cleared) and prints agreement and unknown counts:

- model responses (``model-responses/*.jsonl``: real Qwen2.5-Math responses with their
  published correctness): each response's extracted answer against the problem's
  ``answer`` and against the publisher's normalized key ``gt``; agreement with ``score``;
- MATH-500 and GSM8K references, read by the importer's own parsers: every reference
  solution must grade correct against its problem's ground truth;
- MATH-500 answers restated (``\\dfrac``, ``\\left(``, a trailing full stop, the normalized
  form) must grade correct, and with one digit changed (also followed by a unit) wrong;
- GSM8K answers restated as models state them (``\\boxed{1,080}``, ``\\$1080``,
  ``1080 dollars``, ``1080.00``) must grade correct, one more than the answer wrong, and a
  reference cut off before its final line (a truncated generation) wrong for having no answer.

Disagreements and unknowns are listed (up to --show) with the rule that decided them, so a
publisher error can be told from a grader error. Reads data only; writes nothing.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from annotate.pool import importing
from bench.data import DATA
from steps import grading, normalizing
from steps.answers import extract_answer

# The import formats' own line parsers: references read exactly as an import reads them.
parse_gsm8k, parse_math = importing.FORMATS["gsm8k"].parse, importing.FORMATS["math"].parse

class Command(BaseCommand):
    help = "Grading agreement with published correctness on real model responses, and on references."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--data", type=Path, default=DATA, help=f"data folder (default {DATA})")
        parser.add_argument("--lines", type=int, default=0, help="reference lines read per file (default all)")
        parser.add_argument("--show", type=int, default=10, help="disagreements to list per set")

    def handle(self, *args, data: Path, lines: int, show: int, **options) -> None:
        grading.clear_cache()
        for path in sorted((data / "model-responses").glob("*.jsonl")):
            for key in ("answer", "gt"):
                self._report(f"{path.name} vs {key}", _responses(path, key), show)
        math500 = data / "math500" / "test.jsonl"
        self._report("MATH-500 references", _references(math500, parse_math, limit=lines), show)
        self._report("MATH-500 answers restated", _math_variants(math500, lines, wrong=False), show)
        self._report("MATH-500 answers with a digit changed", _math_variants(math500, lines, wrong=True), show)
        for split in ("test", "train"):
            references = _references(data / "gsm8k" / f"{split}.jsonl", parse_gsm8k, limit=lines)
            self._report(f"GSM8K {split} references", references, show)
        test = data / "gsm8k" / "test.jsonl"
        self._report("GSM8K test answers as models state them", _restated(test, lines), show)
        self._report("GSM8K test references cut before the answer", _truncated(test, lines), show)

    def _report(self, name: str, cases: Iterator[tuple[str | None, str, bool]], show: int) -> None:
        started = time.monotonic()
        outcomes: Counter[str] = Counter()
        notes: Counter[str] = Counter()
        shown = []
        for answer, truth, published in cases:
            graded = grading.judge(answer=answer, truth=truth)
            outcomes[_outcome(graded.is_correct, published)] += 1
            if graded.note:
                notes[graded.note] += 1
            if graded.is_correct is not published and len(shown) < show:
                how = f"graded {graded.is_correct} ({graded.note or 'plain'}), published {published}"
                shown.append(f"    answer {answer!r} truth {truth!r}: {how}")
        total = sum(outcomes.values())
        seconds = time.monotonic() - started
        self.stdout.write(
            f"{name}: {outcomes['agree']}/{total} agree ({100 * outcomes['agree'] / max(total, 1):.2f} %),"
            f" {outcomes['disagree']} disagree, {outcomes['unknown']} unknown, {seconds:.1f} s"
        )
        for note, count in notes.most_common():
            self.stdout.write(f"    decided by: {note}: {count}")
        for line in shown:
            self.stdout.write(line)


def _outcome(graded: bool | None, published: bool) -> str:
    if graded is None:
        return "unknown"
    return "agree" if graded is published else "disagree"


def _responses(path: Path, key: str) -> Iterator[tuple[str | None, str, bool]]:
    """(extracted answer, the problem's `key`, published correctness) per response."""
    with open(path) as handle:
        for problem in map(json.loads, handle):
            for response, published in zip(problem["response"], problem["score"], strict=True):
                yield extract_answer(response), problem[key], bool(published)


def _references(path: Path, parse, limit: int = 0) -> Iterator[tuple[str | None, str, bool]]:
    """(the reference's final answer, the ground truth, True) per line, as the importer reads it."""
    with open(path) as handle:
        for line_no, line in enumerate(handle, 1):
            if limit and line_no > limit:
                return
            record = parse(json.loads(line), line_no)
            yield record.final_answer, record.ground_truth_answer, True


def _restated(path: Path, limit: int) -> Iterator[tuple[str | None, str, bool]]:
    for _, truth, _ in _references(path, parse_gsm8k, limit=limit):
        plain = truth.replace(",", "")
        grouped = f"{int(plain):,}" if plain.lstrip("-").isdigit() else plain
        for style in (f"\\boxed{{{grouped}}}", f"\\${plain}", f"{plain} dollars", f"{plain}.00"):
            yield extract_answer(f"So the total is {style}.\nThe answer is {style}."), truth, True
        if plain.lstrip("-").isdigit():
            yield extract_answer(f"The answer is {int(plain) + 1}."), truth, False


def _truncated(path: Path, limit: int) -> Iterator[tuple[str | None, str, bool]]:
    with open(path) as handle:
        for line_no, line in enumerate(handle, 1):
            if limit and line_no > limit:
                return
            record = parse_gsm8k(json.loads(line), line_no)
            text = record.ground_truth_solution.rsplit("####", 1)[0]
            yield extract_answer(text[: len(text) * 3 // 4]), record.ground_truth_answer, False


def _math_variants(path: Path, limit: int, *, wrong: bool) -> Iterator[tuple[str | None, str, bool]]:
    for _, truth, _ in _references(path, parse_math, limit=limit):
        digit = re.search(r"\d", truth)
        if wrong and digit is None:
            continue
        answer = truth
        if wrong:
            answer = truth[: digit.start()] + str((int(digit[0]) + 1) % 10) + truth[digit.end():]
        bracketed = answer.replace("(", "\\left(").replace(")", "\\right)")
        styles = {answer.replace("\\frac", "\\dfrac"), bracketed, answer + "."}
        styles |= {answer + "\\text{ units}"} if wrong else {normalizing.normalize(answer)}
        for style in styles:
            yield style, truth, not wrong
