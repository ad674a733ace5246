"""Rollout labels against known first errors, through the product's own labelers.

`scoring.generation.rollouts` labels steps by completing prefixes with a generator
(Math-Shepherd: every prefix; OmegaPRM: a binary search). `ChainCompleter` is a stand-in
generator for the arithmetic chains of `bench.learnable_domain`: from a prompt (problem and a
prefix of steps) it writes the rest of the chain and `# Answer`. After a right prefix it
reaches the right answer with probability `solve_from_right` (else it slips once); after a
wrong prefix it carries the wrong value on, except with probability `solve_from_wrong` (it
starts over). So the product's labelers run unchanged, and their first errors can be compared
with the known ones: the agreement a human first error would have with them if the
generator behaved so.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.learnable_domain import STEP, _apply
from bench.simulation_pool import PoolProblem
from scoring.generation import rollouts
from scoring.generation.generators import Sample, SamplingParams, Usage

PROBLEM = re.compile(r"Start at (\d+)\. (.*?)\.\n")
OPERATION = re.compile(r"(add|subtract|multiply by) (\d+)")
SYMBOL = {"add": "+", "subtract": "-", "multiply by": "×"}


@dataclass
class ChainCompleter:
    solve_from_right: float = 0.7
    solve_from_wrong: float = 0.03
    seed: int = 0
    name: str = "chain-completer"
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        out = []
        for prompt in prompts:
            samples = [self._complete(prompt) for _ in range(params.n)]
            self.usage.add(samples)
            out.append(samples)
        return out

    def _complete(self, prompt: str) -> Sample:
        match = PROBLEM.search(prompt)
        if match is None:
            raise ValueError("prompt: no 'Start at N. ...' problem in it")
        start = int(match[1])
        ops = [(SYMBOL[name], int(b)) for name, b in OPERATION.findall(match[2])]
        lines = prompt.split("Solution:\n", 1)[1].split("\n\n")
        written = [m for m in map(STEP.match, lines) if m]
        right = all(_apply(int(m[1]), m[2], int(m[3])) == int(m[4]) for m in written)
        succeeds = self.rng.random() < (self.solve_from_right if right else self.solve_from_wrong)
        value, todo = (int(written[-1][4]) if written else start), ops[len(written):]
        if succeeds and not right:
            value, todo = start, ops  # a wrong prefix is redone from the start
        slip = right and not succeeds  # a right prefix that fails slips once on the way
        steps = []
        for op, b in todo:
            result = _apply(value, op, b) + (1 if slip else 0)
            steps.append(f"{value} {op} {b} = {result}")
            value, slip = result, False
        value += 1 if slip else 0  # nothing left to slip on: the final answer is off
        text = "".join(step + "\n\n" for step in steps) + f"# Answer\n\n{value}"
        return Sample(text=text, prompt_tokens=len(prompt) // 4, completion_tokens=len(text) // 4, finish_reason="stop")


def agreement(problems: Sequence[PoolProblem], *, n: int = 4, seed: int = 0, **completer) -> dict:
    """Per method: how often its first error is the known one, too early, too late; rollouts spent."""
    generator = ChainCompleter(seed=seed, **completer)
    params = SamplingParams(n=n, seed=seed)
    found: dict[str, list[tuple[int | None, int | None, int]]] = {m: [] for m in rollouts.METHODS}
    for problem in problems:
        for solution in problem.solutions:
            task = rollouts.RolloutTask(problem=problem.statement, answer=problem.answer, steps=tuple(solution.steps))
            for method in rollouts.METHODS:
                result = rollouts.label_steps(method, task, generator, params)
                found[method].append((solution.first_error, result.first_error, result.rollouts))
    return {method: _agreement(rows) for method, rows in found.items()}


def _agreement(rows: list[tuple[int | None, int | None, int]]) -> dict:
    wrong = [(h, r) for h, r, _ in rows if h is not None]
    early = sum(r is not None and (h is None or r < h) for h, r, _ in rows)
    return {"solutions": len(rows), "agree": sum(h == r for h, r, _ in rows) / len(rows),
            "agree_on_wrong": sum(h == r for h, r in wrong) / len(wrong) if wrong else None,
            "too_early": early / len(rows),
            "too_late_or_missed": sum(h is not None and (r is None or r > h) for h, r, _ in rows) / len(rows),
            "rollouts_per_solution": sum(c for *_, c in rows) / len(rows)}
