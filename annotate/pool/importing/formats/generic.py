"""``generic``: one solution per line, ``{"problem", "ground_truth_answer", "ground_truth_solution"?,
"steps": [...] | "solution": "text", "answer"?, "source"?, "generator"?, "meta"?}`` (the README's
table names exactly these fields)."""
from annotate.pool import prm800k
from annotate.pool.importing.formats.base import ImportFormat, Record, steps_of, text_of
from annotate.pool.prm800k import LineError
from steps.answers import extract_answer
from steps.splitting import SplitMode


def parse_generic(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    statement = text_of(obj, "problem")
    truth = text_of(obj, "ground_truth_answer")
    if "steps" not in obj and "solution" not in obj:
        raise LineError("steps", "is missing (expected 'steps' or 'solution')")
    steps = steps_of(obj, None if "steps" in obj else text_of(obj, "solution"), split_mode)
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise LineError("meta", f"must be an object, got {prm800k.type_name(meta)}")
    answer = text_of(obj, "answer", required=False)
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=truth,
        ground_truth_solution=text_of(obj, "ground_truth_solution", required=False),
        steps=steps, final_answer=answer or extract_answer("\n\n".join(steps)),
        source=text_of(obj, "source", required=False, max_length=100) or "",
        generator=text_of(obj, "generator", required=False, max_length=100) or "",
        meta=meta,
    )


FORMAT = ImportFormat(
    name="generic",
    help='{"problem", "ground_truth_answer", "steps" | "solution", ...}',
    parse=parse_generic,
    detect=lambda obj: "ground_truth_answer" in obj and ("steps" in obj or "solution" in obj),
    detect_rank=40,
)
