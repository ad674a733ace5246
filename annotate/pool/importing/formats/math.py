"""``math``: ``{"problem"|"question", "solution"|"answer"}`` with ``\\boxed{}`` or ``The answer is:
...``; also stored as a reference solution. Detected last: any problem with a solution looks like it."""
from annotate.pool.importing.formats.base import ImportFormat, Record, one_of, steps_of, text_of
from annotate.pool.prm800k import LineError
from steps.answers import extract_answer
from steps.splitting import SplitMode


def parse_math(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    statement = text_of(obj, one_of(obj, ("problem", "question")))
    solution_key = one_of(obj, ("solution", "answer"))
    solution = text_of(obj, solution_key)
    final = extract_answer(solution)
    # MATH as distributed has both: the worked solution and the short answer.
    truth = text_of(obj, "answer") if solution_key == "solution" and "answer" in obj else final
    if truth is None:
        raise LineError(solution_key, "has no final answer (no \\boxed{...} and no 'The answer is: ...')")
    meta = {k: v for k, v in obj.items() if k not in ("problem", "question", "solution", "answer", "steps")}
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=truth, ground_truth_solution=solution,
        steps=steps_of(obj, solution, split_mode), final_answer=final, is_reference=True, generator="reference",
        meta=meta,
    )


FORMAT = ImportFormat(
    name="math",
    help='{"problem", "solution"} with \\boxed{}',
    parse=parse_math,
    detect=lambda obj: ("problem" in obj or "question" in obj) and ("solution" in obj or "answer" in obj),
    detect_rank=60,
)
