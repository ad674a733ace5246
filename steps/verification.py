"""A verification chain in words: the problem and its numbered steps as a verifier reads them, and
a verdict per step as it writes them (ThinkPRM's form: a critique, then the step's verdict).

One text for both sides: the critique export writes the chains a generative verifier is fine-tuned
on with these functions, and a judge prompt that numbers steps the same way asks for what the
export teaches. Django-free, like the rest of `steps`.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

INSTRUCTION = (
    "Verify the solution step by step. For each step, say whether it is right and why, then give "
    "its verdict on a line of its own: \"Step k: correct\" or \"Step k: incorrect\". Stop at the "
    "first incorrect step."
)


def numbered_steps(steps: Iterable[str]) -> str:
    """"Step 1: ..." per step, one after another, numbered from 1 as the verdicts are."""
    return "\n".join(f"Step {number}: {text.strip()}" for number, text in enumerate(steps, start=1))


def verification_prompt(problem: str, steps: Sequence[str]) -> str:
    """What the verifier is asked: the problem, the numbered steps, and how to answer."""
    return f"Problem:\n{problem.strip()}\n\nSolution:\n{numbered_steps(steps)}\n\n{INSTRUCTION}"


def verdict_line(number: int, good: bool) -> str:
    return f"Step {number}: {'correct' if good else 'incorrect'}"


def verification_chain(verdicts: Sequence[tuple[str, bool]]) -> str:
    """The verifier's answer: per step (numbered from 1) its critique, when there is one, then its
    verdict line; steps apart by a blank line."""
    parts = []
    for number, (critique, good) in enumerate(verdicts, start=1):
        said = critique.strip()
        parts.append(f"{said}\n{verdict_line(number, good)}" if said else verdict_line(number, good))
    return "\n\n".join(parts)
