"""Wrong solutions with a known first error, made from correct GSM8K-style reference solutions.

GSM8K solutions carry calculator annotations (`<<48/2=24>>24`), so a step's arithmetic can
be changed and every later step recomputed: the wrong value carries through to the final
answer the way a model's real slip would, and the index of the first wrong step is exact.
Used to build pools for the active-learning simulation and for tests; real data has no
step labels of its own.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

CALCULATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
# A number standing alone; a sentence's full stop after it is fine ("costs 10.").
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w|\.\d)")
OPERATOR = re.compile(r"[+\-*/]")
VISIBLE_OPERATOR = r"\s*([x×*+\-/÷])\s*"
SAFE_EXPRESSION = re.compile(r"^[\d\s.+\-*/()]+$")

# "Subtle" kinds keep the step looking plausible: the result is close, or the arithmetic is
# right but the operation is not the one the problem calls for.
KINDS = ("arithmetic_slip", "off_by_one", "digit_swap", "wrong_operation")
SUBTLE_KINDS = {"off_by_one", "digit_swap", "wrong_operation"}


@dataclass
class CorruptedSolution:
    steps: list[str]
    answer: str
    first_error: int
    kind: str


def gsm8k_steps(answer_text: str) -> tuple[list[str], str]:
    """Split a GSM8K reference answer into its step lines and the `#### N` final answer."""
    body, _, final = answer_text.rpartition("####")
    steps = [line.strip() for line in body.strip().splitlines() if line.strip()]
    return steps, final.strip().replace(",", "")


def corrupt(steps: list[str], final_answer: str, rng: random.Random, *, question: str = "",
            kind: str | None = None) -> CorruptedSolution | None:
    """Corrupt one calculation step and recompute the rest; None if no wrong final answer results."""
    candidates = [i for i, step in enumerate(steps) if CALCULATION.search(step)
                  and not _result_is_ambiguous(steps, i, question)]
    if not candidates:
        return None
    index = rng.choice(candidates)
    kind = kind or rng.choice(KINDS)
    new_steps = list(steps)
    changed = _corrupt_step(steps[index], kind, rng)
    if changed is None:
        return None
    new_steps[index], replacements = changed
    for j in range(index + 1, len(steps)):
        new_steps[j], replacements = _propagate(steps[j], replacements)
    new_answer = replacements.get(_normal(final_answer), final_answer)
    if _normal(new_answer) == _normal(final_answer):
        return None
    return CorruptedSolution(steps=new_steps, answer=new_answer, first_error=index, kind=kind)


def _result_is_ambiguous(steps: list[str], index: int, question: str) -> bool:
    """True when the step's result also stands for another quantity (in the question or an
    earlier step): replacing it downstream would change that quantity too."""
    result = _normal(list(CALCULATION.finditer(steps[index]))[-1].group(2))
    earlier = question + " " + " ".join(CALCULATION.sub(" ", step) for step in steps[:index])
    return result in {_normal(n) for n in NUMBER.findall(earlier)}


def _corrupt_step(step: str, kind: str, rng: random.Random) -> tuple[str, dict[str, str]] | None:
    match = list(CALCULATION.finditer(step))[-1]
    expression, result = match.group(1), match.group(2).strip()
    operator_number = None
    if kind == "wrong_operation":
        operators = [m.start() for m in OPERATOR.finditer(expression) if m.start() > 0]
        if not operators:
            return None
        operator_number = rng.randrange(len(operators))
        at = operators[operator_number]
        swapped = {"+": "-", "-": "+", "*": "+", "/": "*"}[expression[at]]
        expression = expression[:at] + swapped + expression[at + 1:]
        new_result = _evaluate(expression)
    else:
        new_result = _wrong_value(result, kind, rng)
    if new_result is None or _normal(new_result) == _normal(result):
        return None
    replacements = {_normal(result): new_result}
    return _rewrite(step, match, expression, new_result, replacements, operator_number), replacements


def _wrong_value(result: str, kind: str, rng: random.Random) -> str | None:
    value = _to_number(result)
    if value is None:
        return None
    if kind == "off_by_one":
        return _format(value + rng.choice([-1, 1]))
    if kind == "digit_swap":
        digits = result.replace(".", "")
        if len(set(digits)) < 2 or "." in result:
            return _format(value + 1)
        sign, magnitude = ("-", result[1:]) if result.startswith("-") else ("", result)  # "-153" -> "-351"
        return _format(int(sign + (magnitude[::-1].lstrip("0") or "0")))
    return _format(value + max(2, round(abs(value) * rng.uniform(0.2, 0.6))))  # arithmetic slip


def _propagate(step: str, replacements: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Recompute a later step whose calculation uses a changed value."""
    matches = list(CALCULATION.finditer(step))
    if not matches:
        return _replace_numbers(step, replacements), replacements
    out, last = [], 0
    for match in matches:
        expression = _replace_numbers(match.group(1), replacements)
        new_result = _evaluate(expression) if expression != match.group(1) else match.group(2).strip()
        if new_result is not None and _normal(new_result) != _normal(match.group(2)):
            replacements = {**replacements, _normal(match.group(2)): new_result}
        out.append(_replace_numbers(step[last:match.start()], replacements))
        out.append(f"<<{expression}={new_result or match.group(2)}>>")
        last = match.end()
    out.append(_replace_numbers(step[last:], replacements))
    return "".join(out), replacements


def _rewrite(step: str, match: re.Match, expression: str, result: str, replacements: dict[str, str],
             operator_number: int | None) -> str:
    before = step[:match.start()]
    after = _replace_numbers(step[match.end():], replacements)
    if operator_number is not None:
        before = _swap_visible_operator(before, match.group(1), expression, operator_number)
    return f"{before}<<{expression}={result}>>{after}"


def _swap_visible_operator(text: str, old_expression: str, new_expression: str, operator_number: int) -> str:
    """Where the text restates the calculation ("0.2 x 50 = "), show the swapped operator too."""
    parts = re.split(r"([+\-*/])", old_expression.strip())
    pattern = "".join(VISIBLE_OPERATOR if OPERATOR.fullmatch(p) else re.escape(p.strip()) for p in parts if p.strip())
    found = list(re.finditer(pattern, text))
    if not found:
        return text
    visible = found[-1]
    operators = [m for m in OPERATOR.finditer(new_expression) if m.start() > 0]
    group = operator_number + 1
    new_symbol = operators[operator_number].group(0).replace("*", "x" if visible.group(group) in "x×" else "*")
    return text[:visible.start(group)] + new_symbol + text[visible.end(group):]


def _replace_numbers(text: str, replacements: dict[str, str]) -> str:
    return NUMBER.sub(lambda m: replacements.get(_normal(m.group(0)), m.group(0)), text)


def _evaluate(expression: str) -> str | None:
    if not SAFE_EXPRESSION.match(expression):
        return None
    try:
        value = eval(expression, {"__builtins__": {}}, {})  # digits and operators only, checked above
    except (ArithmeticError, SyntaxError):
        return None
    return _format(value)


def _to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _format(value: float) -> str:
    value = round(value, 4)
    return str(int(value)) if float(value).is_integer() else str(value)


def _normal(text: str) -> str:
    number = _to_number(text.strip())
    return _format(number) if number is not None else text.strip()


# --- MATH-style solutions: a wrong value in the step that states the final \boxed{} answer -------
# MATH references have no calculator notes to recompute from, so the corrupted step is the one
# holding the boxed answer: its value changes (one number in it), it now contradicts the steps
# before it, and the final answer is wrong. The first error is that step.

BOXED = "\\boxed{"
MATH_KINDS = ("arithmetic_slip", "off_by_one", "digit_swap")


def math_steps(answer_text: str) -> tuple[list[str], str | None]:
    """Split a MATH reference (steps between blank lines, `The answer is: X` last) into steps and answer."""
    body, said, final = answer_text.rpartition("The answer is:")
    if not said:
        body, final = answer_text, ""
    steps = [block.strip() for block in re.split(r"\n\s*\n", body.strip()) if block.strip()]
    span = boxed_span(body)
    answer = final.strip() or (body[span[0]:span[1]] if span else None)
    return steps, answer


def boxed_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the content of the last `\\boxed{...}`, braces balanced; None if absent."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(BOXED)
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return (start + len(BOXED), i - 1) if depth == 0 else None


def corrupt_boxed(steps: list[str], rng: random.Random, *, kind: str | None = None) -> CorruptedSolution | None:
    """Change one number of the last boxed answer; None when there is no number to change."""
    index = next((i for i in range(len(steps) - 1, -1, -1) if BOXED in steps[i]), None)
    span = boxed_span(steps[index]) if index is not None else None
    if span is None:
        return None
    content = steps[index][span[0]:span[1]]
    numbers = list(NUMBER.finditer(content))
    if not numbers:
        return None
    kind = kind or rng.choice(MATH_KINDS)
    number = rng.choice(numbers)
    wrong = _wrong_value(number.group(0), kind, rng)
    if wrong is None or _normal(wrong) == _normal(number.group(0)):
        return None
    new_content = content[:number.start()] + wrong + content[number.end():]
    new_steps = list(steps)
    new_steps[index] = steps[index][:span[0]] + new_content + steps[index][span[1]:]
    return CorruptedSolution(steps=new_steps, answer=new_content, first_error=index, kind=kind)
