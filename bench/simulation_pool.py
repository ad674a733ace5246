"""The benchmark's pool: problems with solutions whose first error is known.

References plus variants with one corrupted step whose error carries to the final answer:
GSM8K (`bench.corruption.corrupt`, recomputed through the calculator notes), MATH-500
(`corrupt_boxed`: a wrong value in the step holding the boxed answer) or project-made word
problems (`annotate.pool.synthetic`). Also what the simulated annotator answers, and the pool
side of the baselines (position-only, the `a op b = c` rule).
"""
from __future__ import annotations

import dataclasses
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from annotate.models import Problem, Solution, Step
from annotate.pool import synthetic
from bench import corruption
from steps.ratings import Rating

POOLS = ("gsm8k", "math500", "synthetic")
CALCULATION_NOTE = re.compile(r"<<[^<>]*>>")


# --- problems -----------------------------------------------------------------------------------


@dataclass
class PoolSolution:
    steps: list[str]
    answer: str
    first_error: int | None  # None: every step is right
    kind: str | None = None


@dataclass
class PoolProblem:
    statement: str
    answer: str
    solutions: list[PoolSolution]  # the correct one first


def gsm8k_problems(path: Path, *, n: int, variants: int, seed: int) -> list[PoolProblem]:
    """GSM8K problems with the reference plus up to `variants` corrupted copies of distinct kinds.

    The calculator notes (`<<48/2=24>>`) are dropped from what the PRM and annotators see:
    model-written solutions do not carry them. A variant whose visible text did not change
    at the corrupted step (the error hid in a note) is discarded.
    """
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    rng = random.Random(seed + 1)
    problems = []
    for obj in lines:
        if len(problems) >= n:
            break
        steps, answer = corruption.gsm8k_steps(obj["answer"])
        reference = PoolSolution(visible(steps, answer), answer, None)
        solutions = [reference]
        for kind in rng.sample(corruption.KINDS, k=min(variants, len(corruption.KINDS))):
            bad = corruption.corrupt(steps, answer, rng, question=obj["question"], kind=kind)
            if bad is None:
                continue
            shown = visible(bad.steps, bad.answer)
            if shown[bad.first_error] != reference.steps[bad.first_error]:
                solutions.append(PoolSolution(shown, bad.answer, bad.first_error, bad.kind))
        if len(solutions) > 1:
            problems.append(PoolProblem(obj["question"].strip(), answer, solutions))
    return problems


def math500_problems(path: Path, *, n: int, skip: int, variants: int, seed: int) -> list[PoolProblem]:
    """MATH-500 problems: the reference plus copies whose boxed-answer step states a wrong value."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(lines)
    rng = random.Random(seed + 1)
    problems = []
    for obj in lines[skip:]:
        if len(problems) >= n:
            break
        steps, answer = corruption.math_steps(obj["answer"])
        if answer is None:
            continue
        solutions = [PoolSolution([*steps, f"# Answer\n\n{answer}"], answer, None)]
        for kind in rng.sample(corruption.MATH_KINDS, k=min(variants, len(corruption.MATH_KINDS))):
            bad = corruption.corrupt_boxed(steps, rng, kind=kind)
            if bad is not None:
                solutions.append(
                    PoolSolution([*bad.steps, f"# Answer\n\n{bad.answer}"], bad.answer, bad.first_error, kind)
                )
        if len(solutions) > 1:
            problems.append(PoolProblem(obj["question"].strip(), answer, solutions))
    return problems


def visible(steps: Sequence[str], answer: str) -> list[str]:
    return [CALCULATION_NOTE.sub("", step).strip() for step in steps] + [f"# Answer\n\n{answer}"]


def synthetic_problems(*, n: int, variants: int, seed: int) -> list[PoolProblem]:
    """Project-made word problems (annotate.pool.synthetic): no third-party data needed."""
    problems = []
    for p in synthetic.make_pool(n_problems=n, variants_per_problem=variants, seed=seed):
        solutions = [PoolSolution(p.correct.steps, str(p.answer), None)]
        solutions += [PoolSolution(v.steps, str(v.answer), v.first_error, v.corruption) for v in p.variants]
        if len(solutions) > 1:
            problems.append(PoolProblem(p.statement, str(p.answer), solutions))
    return problems


def make_problems(*, pool: str, data: Path | None, n_pool: int, n_heldout: int,
                  seed: int = 0) -> tuple[list[PoolProblem], list[PoolProblem]]:
    """(pool problems, held-out problems). GSM8K: pool from train, held-out from test."""
    if pool == "synthetic":
        problems = distinct(synthetic_problems(n=n_pool + n_heldout, variants=3, seed=seed))
        return problems[:n_pool], problems[n_pool:]
    if pool == "gsm8k":
        if data is None:
            raise ValueError("--data: the folder holding gsm8k/train.jsonl and gsm8k/test.jsonl")
        for name in ("train", "test"):
            if not (data / "gsm8k" / f"{name}.jsonl").exists():
                raise ValueError(f"--data: {data / 'gsm8k' / f'{name}.jsonl'} does not exist")
        pool_problems = distinct(gsm8k_problems(data / "gsm8k" / "train.jsonl", n=n_pool, variants=2, seed=seed))
        held_out = gsm8k_problems(data / "gsm8k" / "test.jsonl", n=n_heldout, variants=3, seed=seed)
        return pool_problems, distinct(held_out, exclude=pool_problems)
    if pool == "math500":
        path = (data or Path("-")) / "math500" / "test.jsonl"
        if not path.exists():
            raise ValueError(f"--data: {path} does not exist")
        # MATH-500 has one split: the first problems (after a seeded shuffle) are the pool, the next held out.
        pool_problems = distinct(math500_problems(path, n=n_pool, skip=0, variants=2, seed=seed))
        # Building the pool skips a few lines (no number to corrupt); distinct() drops any overlap left.
        held_out = math500_problems(path, n=n_heldout, skip=len(pool_problems) + 30, variants=3, seed=seed)
        return pool_problems, distinct(held_out, exclude=pool_problems)
    raise ValueError(f"--pool {pool!r}: expected one of {', '.join(POOLS)}")


def distinct(problems: Sequence[PoolProblem], *, exclude: Sequence[PoolProblem] = ()) -> list[PoolProblem]:
    """Each problem once (and none of `exclude`), each solution once: the pool's content hashes are unique."""
    seen = {p.statement for p in exclude}
    out = []
    for problem in problems:
        if problem.statement in seen:
            continue
        seen.add(problem.statement)
        texts: set[tuple[str, ...]] = set()
        solutions = [s for s in problem.solutions if not (tuple(s.steps) in texts or texts.add(tuple(s.steps)))]
        if len(solutions) > 1:
            out.append(dataclasses.replace(problem, solutions=solutions))
    return out


def write_problems(problems: Sequence[PoolProblem], *, split: str, source: str) -> list[int]:
    """Problems, solutions and steps into the database; returns the solution ids in order."""
    rows = []
    for problem in problems:
        p_hash = Problem.hash_for(problem.statement, problem.answer)
        db_problem = Problem.objects.create(statement=problem.statement, ground_truth_answer=problem.answer,
                                            source=source, split=split, content_hash=p_hash)
        for s in problem.solutions:
            rows.append((s, Solution(
                problem=db_problem, final_answer=s.answer, is_correct=s.first_error is None, source=source,
                generator="reference" if s.first_error is None else f"corrupted:{s.kind}",
                meta={"first_error": s.first_error, "kind": s.kind, "split": split},
                content_hash=Solution.hash_for(p_hash, s.steps),
            )))
    Solution.objects.bulk_create([solution for _, solution in rows], batch_size=1000)
    Step.objects.bulk_create(
        (Step(solution=solution, index=i, text=text) for s, solution in rows for i, text in enumerate(s.steps)),
        batch_size=2000,
    )
    return [solution.pk for _, solution in rows]


def known_ratings(n_steps: int, first_error: int | None) -> list[Rating]:
    """What the simulated annotator answers: +1 up to the first error, -1 there, then stop."""
    if first_error is None:
        return [Rating.POSITIVE] * n_steps
    return [Rating.POSITIVE] * first_error + [Rating.NEGATIVE]


def describe(problems: Sequence[PoolProblem]) -> dict:
    wrong = [s for p in problems for s in p.solutions if s.first_error is not None]
    kinds = Counter(s.kind for s in wrong)
    subtle = sum(n for kind, n in kinds.items() if kind in corruption.SUBTLE_KINDS)
    return {"problems": len(problems), "solutions": sum(len(p.solutions) for p in problems),
            "wrong_answer_solutions": len(wrong), "kinds": dict(kinds),
            "subtle_share": subtle / len(wrong) if wrong else None}



# --- the pool side of the baselines -----------------------------------------------------------


def position_probabilities(pool: Sequence[PoolProblem]) -> dict[int, float]:
    """P(step good | its index) over the pool's known labels: the position-only model."""
    good, seen = Counter(), Counter()
    for problem in pool:
        for s in problem.solutions:
            for i, rating in enumerate(known_ratings(len(s.steps), s.first_error)):
                seen[i] += 1
                good[i] += rating == Rating.POSITIVE
    return {i: good[i] / seen[i] for i in seen}


ARITHMETIC = re.compile(
    r"((?:\$?\d[\d,]*(?:\.\d+)?\s*[-+*/x×÷]\s*)+\$?\d[\d,]*(?:\.\d+)?)"  # the expression: a op b [op c ...]
    r"\s*=\s*\$?(-?\d[\d,]*(?:\.\d+)?)"  # = the written result
)


def arithmetic_ok(step: str) -> bool:
    """Whether every `a op b = c` written in the step is right (the rule-based baseline)."""
    for match in ARITHMETIC.finditer(step):
        expression = (
            match.group(1).replace("$", "").replace(",", "").replace("x", "*").replace("×", "*").replace("÷", "/")
        )
        try:
            value = eval(expression, {"__builtins__": {}}, {})  # digits and operators only (the regex)
        except (ArithmeticError, SyntaxError):
            continue
        if abs(value - float(match.group(2).replace(",", ""))) > 1e-6 * max(1.0, abs(value)):
            return False
    return True
