"""./stepwise bench bench_splitting [--data-dir tests/data] [--modes auto,line,...]

What step splitting makes of real text, before and after the merging rules of
``steps.splitting``, on three corpora:

- ``qwen25-math``: real Qwen2.5-Math chain-of-thought responses
  (``model-responses/math_qwen25_cot_20x8.jsonl``, field ``response``, 8 per line);
- ``math500``: MATH-500 reference solutions (``math500/test.jsonl``, field ``answer``);
- ``gsm8k``: GSM8K reference answers (``gsm8k/test.jsonl``, field ``answer``).

For each corpus it prints, per splitter: solutions, steps per solution, the share of steps
that are a lone equation, the share that end with ":" (a lead-in cut from what it
introduces; the last step excluded), the math blocks cut in two, and the time per solution.
"before" is the splitter imports used before math-aware splitting (blank lines if there are any, else
lines; GSM8K always lines), reproduced here for the comparison.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench.data import DATA
from steps import scanning, splitting

CORPORA = {
    "qwen25-math": ("model-responses/math_qwen25_cot_20x8.jsonl", "response"),
    "math500": ("math500/test.jsonl", "answer"),
    "gsm8k": ("gsm8k/test.jsonl", "answer"),
}
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


@dataclass
class Figures:
    solutions: int
    steps: int
    lone_equations: int
    lead_ins: int
    blocks_cut: int
    seconds: float

    def row(self, corpus: str, splitter: str) -> str:
        return (f"{corpus:<12} {splitter:<11} {self.solutions:>5} {self.steps / self.solutions:>8.2f} "
                f"{100 * self.lone_equations / self.steps:>8.1f}% {100 * self.lead_ins / self.steps:>8.1f}% "
                f"{self.blocks_cut:>7} {1e6 * self.seconds / self.solutions:>8.0f}")


HEADER = (f"{'corpus':<12} {'splitter':<11} {'sols':>5} {'steps/sol':>8} {'lone eq':>9} {'ends :':>9} "
          f"{'cut':>7} {'us/sol':>8}")


def split_as_before(text: str, mode: str) -> list[str]:
    """The splitter before math-aware splitting: blank-line paragraphs or lines, math blocks ignored."""
    text = text.replace("\r\n", "\n").strip()
    if mode == "auto":
        mode = "blank_line" if _BLANK_LINE.search(text) else "line"
    parts = _BLANK_LINE.split(text) if mode == "blank_line" else text.split("\n")
    steps = [part.strip() for part in parts if part.strip()]
    for i, step in enumerate(steps):  # the "# Answer" block joined the step before it
        if splitting.ANSWER_HEADING.fullmatch(step):
            return steps[:max(i - 1, 0)] + ["\n\n".join(steps[max(i - 1, 0):])]
    return steps


def measure(texts: list[str], split) -> Figures:
    started = time.perf_counter()
    splits = [split(text) for text in texts]
    seconds = time.perf_counter() - started
    steps = [step for split_steps in splits for step in split_steps]
    cut = sum(1 for text, split_steps in zip(texts, splits) for block in scanning.spans(text)
              if not any(text[block.start:block.end] in step for step in split_steps))
    return Figures(
        solutions=len(texts), steps=len(steps), lone_equations=sum(map(splitting.is_lone_equation, steps)),
        lead_ins=sum(splitting.is_lead_in(step) for split_steps in splits for step in split_steps[:-1]),
        blocks_cut=cut, seconds=seconds,
    )


def read_corpus(data_dir: Path, relative: str, field: str) -> list[str]:
    texts = []
    with open(data_dir / relative) as handle:
        for line in handle:
            if line.strip():
                value = json.loads(line)[field]
                texts.extend(value if isinstance(value, list) else [value])
    return texts


class Command(BaseCommand):
    help = "Steps per solution, lone-equation and colon-ending step shares before and after the step splitter"
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--data-dir", default=str(DATA))
        parser.add_argument("--modes", default="auto,blank_line,line,sentence",
                            help="Comma-separated split modes to measure after 'before'")

    def handle(self, *args, data_dir: str, modes: str, **options):
        folder = Path(data_dir)
        chosen = [splitting.check_mode(mode.strip()) for mode in modes.split(",") if mode.strip()]
        if "explicit" in chosen:
            raise CommandError("explicit takes steps as given; there is nothing to measure")
        self.stdout.write(HEADER)
        for corpus, (relative, field) in CORPORA.items():
            if not (folder / relative).exists():
                raise CommandError(f"{folder / relative} not found (pass --data-dir)")
            texts = read_corpus(folder, relative, field)
            # GSM8K puts one step per line: its importer splits it by lines under auto.
            default = "line" if corpus == "gsm8k" else "auto"
            self.stdout.write(measure(texts, partial(split_as_before, mode=default)).row(corpus, "before"))
            for mode in chosen:
                split = partial(splitting.split_steps, mode=default if mode == "auto" else mode)
                self.stdout.write(measure(texts, split).row(corpus, mode))
