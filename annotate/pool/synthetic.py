"""Project-made arithmetic word problems, with correct solutions and one-wrong-step variants.

The demo pool and the tests are built from these, so the product needs no third-party data.
Each problem is a chain of operations on quantities; a solution states one operation per
step ("a op b = c") and ends in a `# Answer` block. A corrupted variant changes one step
and carries the wrong value through every later step, so its final answer is wrong and the
index of its first error is known exactly.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hiro", "Ines", "Jon", "Kira", "Luis"]
ITEMS = ["apples", "marbles", "stickers", "books", "cookies", "stamps", "shells", "pencils"]

# Per operation: how the problem words it, how a solution step words it, symbol, function.
# Solution steps always state the arithmetic as "a op b = c".
OPERATIONS = {
    "add": ("gets {b} more {item}", "After getting {b} more, there are", "+", lambda a, b: a + b),
    "sub": ("gives away {b} {item}", "After giving {b} away, there are", "-", lambda a, b: a - b),
    "mul": ("ends up with {b} times as many {item}", "Having {b} times as many means", "*", lambda a, b: a * b),
    "div": ("shares the {item} equally among {b} friends and keeps one share",
            "One of {b} equal shares is", "/", lambda a, b: a // b),
}

CORRUPTIONS = ("arithmetic_slip", "wrong_operation", "digit_swap", "off_by_one")


@dataclass
class SyntheticSolution:
    steps: list[str]
    answer: int
    first_error: int | None  # 0-based index of the first wrong step; None when correct
    corruption: str | None = None


@dataclass
class SyntheticProblem:
    statement: str
    answer: int
    start: int
    plan: list[tuple[str, int]]
    item: str
    correct: SyntheticSolution
    variants: list[SyntheticSolution] = field(default_factory=list)


def make_problem(rng: random.Random, *, n_operations: int | None = None) -> SyntheticProblem:
    """A word problem of 2-6 operations whose intermediate values stay positive integers."""
    n_operations = n_operations or rng.randint(2, 6)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    start = rng.randint(2, 40)
    plan: list[tuple[str, int]] = []
    value = start
    for _ in range(n_operations):
        op, b = _next_operation(rng, value)
        plan.append((op, b))
        value = OPERATIONS[op][3](value, b)
    sentences = [f"{name} has {start} {item}."]
    sentences += [f"Then {name} {OPERATIONS[op][0].format(b=b, item=item)}." for op, b in plan]
    statement = " ".join(sentences) + f" How many {item} does {name} have now?"
    correct = solve(start, plan, item=item)
    return SyntheticProblem(statement=statement, answer=correct.answer, start=start, plan=plan, item=item,
                            correct=correct)


def _next_operation(rng: random.Random, value: int) -> tuple[str, int]:
    choices = ["add", "mul"] + (["sub"] if value > 2 else []) + (["div"] if value >= 4 else [])
    op = rng.choice(choices)
    if op == "add":
        return op, rng.randint(1, 30)
    if op == "sub":
        return op, rng.randint(1, value - 1)
    if op == "mul":
        return op, rng.randint(2, 4)
    divisors = [d for d in range(2, 7) if value % d == 0]
    return ("div", rng.choice(divisors)) if divisors else ("add", rng.randint(1, 30))


def solve(start: int, plan: list[tuple[str, int]], *, item: str = "items", corrupt_at: int | None = None,
          corruption: str | None = None) -> SyntheticSolution:
    """Write out the step-by-step solution, optionally corrupting one step."""
    steps, value = [], start
    for i, (op, b) in enumerate(plan):
        _, wording, symbol, function = OPERATIONS[op]
        result = function(value, b)
        if i == corrupt_at:
            result = _corrupt(op, value, b, result, corruption)
        steps.append(f"{wording.format(b=b)} {value} {symbol} {b} = {result} {item}.")
        value = result
    steps.append(f"# Answer\n\n{value}")
    return SyntheticSolution(steps=steps, answer=value, first_error=corrupt_at, corruption=corruption)


def _corrupt(op: str, a: int, b: int, result: int, corruption: str | None) -> int:
    """A wrong result for the step. The written operation stays, so the step contradicts itself."""
    if corruption == "wrong_operation":
        other = "mul" if op in ("add", "sub") else "add"
        wrong = OPERATIONS[other][3](a, b)
        return wrong if wrong != result else result + b
    if corruption == "digit_swap" and result >= 10 and str(result) != str(result)[::-1]:
        return int(str(result)[::-1])
    if corruption == "off_by_one":
        return result + 1
    return result + 10  # arithmetic slip, also the fallback when a swap is a no-op


def make_pool(*, n_problems: int, variants_per_problem: int = 2, seed: int = 0) -> list[SyntheticProblem]:
    """Problems with their correct solution and corrupted variants of several kinds."""
    rng = random.Random(seed)
    problems = []
    for _ in range(n_problems):
        problem = make_problem(rng)
        for _ in range(variants_per_problem):
            variant = solve(problem.start, problem.plan, item=problem.item,
                            corrupt_at=rng.randrange(len(problem.plan)), corruption=rng.choice(CORRUPTIONS))
            if variant.answer != problem.answer:
                problem.variants.append(variant)
        problems.append(problem)
    return problems


def generic_lines(problems: list[SyntheticProblem], *, source: str = "synthetic") -> list[dict]:
    """The pool in the importer's `generic` format, first-error index kept in `meta`."""
    lines = []
    for problem in problems:
        for solution in [problem.correct, *problem.variants]:
            lines.append({
                "problem": problem.statement,
                "ground_truth_answer": str(problem.answer),
                "ground_truth_solution": "\n\n".join(problem.correct.steps),
                "steps": solution.steps,
                "source": source,
                "meta": {"first_error": solution.first_error, "corruption": solution.corruption},
            })
    return lines
