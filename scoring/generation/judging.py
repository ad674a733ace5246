"""A verifier model as judge: the prompt it is asked, and the reading of its answer into per-step verdicts.

Plain Python, no Django, beside `rollouts`: `scoring.generation.judge_labeling` feeds it solutions and
stores what it returns. The default prompt (`steps.verification`, shared with the critique export)
follows ThinkPRM (arXiv 2504.16828): the problem, the numbered steps, "verify step by step", then
per step a short critique followed by a verdict line `Step N: correct` or `Step N: incorrect`,
stopping at the first incorrect step.

The reading is strict on purpose: verdicts must cover steps 1..k in order, where k is the number
of steps or the first step judged incorrect (the steps after it stay unlabeled, as PRM800K stops
at the first error). Anything else (no verdicts, verdicts in another form or language, a step
skipped, repeated or out of order, an answer cut at max_tokens or longer than `MAX_ANSWER_CHARS`)
is `Unparseable` with its reason: a wrong guess would be stored as a label, a refusal is counted.

A verdict's probability is the model's own where it gave logprobs (`verdict_probability`), else
1.0 or 0.0, as it is when the logprobs fall on the other side of the written verdict.
"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from steps.verification import BAD, GOOD

if TYPE_CHECKING:  # types only: this module stays plain text handling, with no model library behind it
    from scoring.generation.generators import Sample, TokenLogprob

# The longest answer read; a longer one is a runaway generation, kept raw but not read.
MAX_ANSWER_CHARS = 20_000
MAX_CRITIQUE_CHARS = 2_000
# The verdict alternatives read at the verdict's token (and top alternatives asked per token).
TOP_LOGPROBS = 5

# A verdict line: "Step 3: correct", tolerating markdown emphasis, a dash or a full stop around it.
VERDICT_LINE = re.compile(
    r"^[ \t>*_#-]*step[ \t]*(?P<number>\d+)[ \t*_]*[:.\-\u2013\u2014][ \t*_]*"
    r"(?P<verdict>correct|incorrect)[ \t*_.!\r]*$",
    re.IGNORECASE | re.MULTILINE,
)


def prompt_version(template: str) -> str:
    """A short hash of the template's text, stored with a run: runs asked the same way say so."""
    return hashlib.sha256(template.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StepVerdict:
    good: bool
    critique: str
    p_good: float  # the judge's probability that the step is correct


@dataclass(frozen=True)
class Judged:
    """A parsed answer: verdicts of steps 1..k, k the step count or the first incorrect step."""

    verdicts: tuple[StepVerdict, ...]


@dataclass(frozen=True)
class Unparseable:
    reason: str


def read_answer(sample: Sample, *, n_steps: int) -> Judged | Unparseable:
    """The judge's verdicts on a solution of `n_steps` steps, or why its answer cannot be read."""
    text = sample.text
    if sample.finish_reason == "length":
        return Unparseable("truncated: the answer reached max_tokens before its last verdict")
    if len(text) > MAX_ANSWER_CHARS:
        return Unparseable(f"too long: {len(text)} characters (at most {MAX_ANSWER_CHARS} are read)")
    matches = list(VERDICT_LINE.finditer(text))
    if not matches:
        return Unparseable("no verdicts: no line of the form 'Step N: correct' or 'Step N: incorrect'")
    problem = _order_problem([int(m["number"]) for m in matches], n_steps=n_steps)
    if problem:
        return Unparseable(problem)
    verdicts = []
    start = 0
    for match in matches:
        good = match["verdict"].lower() == GOOD
        critique = text[start:match.start()].strip()[:MAX_CRITIQUE_CHARS]
        p_good = verdict_probability(sample.logprobs, text, match.start("verdict"))
        if p_good is None or (p_good >= 0.5) != good:
            # The written verdict decides (and where labels stop); a probability on its other side
            # (sampled, or a split token read wrongly) is not this verdict's, and every reader takes
            # a verdict as P(good) >= 0.5 (annotate.labeling.sources).
            p_good = 1.0 if good else 0.0
        verdicts.append(StepVerdict(good=good, critique=critique, p_good=p_good))
        start = match.end()
        if not good:
            break  # the steps after the first error stay unlabeled
    if verdicts[-1].good and len(verdicts) < n_steps:
        return Unparseable(f"incomplete: verdicts stop at step {len(verdicts)} of {n_steps}, none incorrect")
    return Judged(tuple(verdicts))


def _order_problem(numbers: list[int], *, n_steps: int) -> str:
    """Why verdict numbers are not 1, 2, 3, ... within the solution's steps ('' when they are)."""
    for position, number in enumerate(numbers, start=1):
        if number > n_steps:
            return f"a verdict for step {number}, but the solution has {n_steps} steps"
        if number != position:
            return (f"verdicts out of order or repeated: step {number} where step {position} was due "
                    f"(verdicts {', '.join(map(str, numbers[:8]))})")
    return ""


def verdict_probability(logprobs: Sequence[TokenLogprob] | None, text: str, offset: int) -> float | None:
    """P(correct) at the verdict word starting at `offset` of `text`: a softmax over the
    alternatives at that token that begin "correct" or "incorrect"; None without logprobs there.

    The token is found by the tokens' text lengths, which rebuild `text` exactly (both protocols
    return each generated token's text); where they do not, there is no probability to read.
    """
    if not logprobs or "".join(t.token for t in logprobs) != text:
        return None
    position = 0
    for entry in logprobs:
        if position + len(entry.token) > offset:
            return _softmax_good(entry.top or ((entry.token, entry.logprob),))
        position += len(entry.token)
    return None


def _softmax_good(alternatives: Sequence[tuple[str, float]]) -> float | None:
    good = bad = 0.0
    for token, logprob in alternatives:
        word = token.strip().lower()
        if word and GOOD.startswith(word):
            good += math.exp(logprob)
        elif word and BAD.startswith(word):
            bad += math.exp(logprob)
    if good + bad == 0.0:
        return None
    return good / (good + bad)
