"""A verification chain in words: the prompt a verifier is asked (the problem and its numbered steps)
and the answer it gives (ThinkPRM's form: per step a critique, then `Step N: correct|incorrect`).

One text for both sides: the judge (`scoring.generation.judging`) asks with `DEFAULT_TEMPLATE`
and reads verdict lines in `GOOD` / `BAD`, and the critique export writes the chains a generative
verifier is fine-tuned on with the same prompt and the same verdict lines, so the export teaches
what the judge asks for. Django-free, like the rest of `steps`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

# The default prompt follows ThinkPRM (arXiv 2504.16828); STEPWISE_JUDGE_PROMPT replaces it.
DEFAULT_TEMPLATE = """You are a careful math teacher. Verify a student's solution to a math problem, step by step.

Problem:
{problem}

Solution, in numbered steps:
{steps}

Verify the solution step by step. For each step in order, write a short critique (one to three \
sentences) saying whether the step is correct and why; then, on a line of its own, its verdict in \
exactly this form:
Step N: correct
or
Step N: incorrect
Stop after the first incorrect step.
"""
TEMPLATE_FIELDS = ("{problem}", "{steps}")
GOOD, BAD = "correct", "incorrect"


def check_template(template: str) -> str:
    """The template, or a ValueError naming the field it lacks."""
    missing = [field for field in TEMPLATE_FIELDS if field not in template]
    if missing:
        raise ValueError(f"a judge prompt template must contain {' and '.join(missing)}")
    return template


def numbered_steps(steps: Iterable[str]) -> str:
    """"Step 1: ..." per step, a blank line apart (a step may span lines), numbered from 1 as the verdicts are."""
    return "\n\n".join(f"Step {number}: {text.strip()}" for number, text in enumerate(steps, start=1))


def render_prompt(template: str, *, problem: str, steps: Sequence[str]) -> str:
    """What the verifier is asked: the template with the problem and the numbered steps."""
    return check_template(template).replace("{problem}", problem.strip()).replace("{steps}", numbered_steps(steps))


def verdict_line(number: int, good: bool) -> str:
    return f"Step {number}: {GOOD if good else BAD}"


def verification_chain(verdicts: Sequence[tuple[str, bool]]) -> str:
    """The verifier's answer: per step (numbered from 1) its critique, when there is one, then its
    verdict line; steps apart by a blank line."""
    parts = []
    for number, (critique, good) in enumerate(verdicts, start=1):
        said = critique.strip()
        parts.append(f"{said}\n{verdict_line(number, good)}" if said else verdict_line(number, good))
    return "\n\n".join(parts)
