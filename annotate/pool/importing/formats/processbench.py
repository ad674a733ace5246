"""``processbench``: Qwen/ProcessBench's ``{"id", "generator", "problem", "steps",
"final_answer_correct", "label"}``, ``label`` the index of the first wrong step or -1. Its labels
are experts', stored as gold automatic labels (``ImportedLabels``): steps before the error good,
the step at it bad, the steps after it unlabeled."""
from annotate.pool import prm800k
from annotate.pool.importing.formats.base import ImportedLabels, ImportFormat, Record, steps_of, text_of
from annotate.pool.prm800k import LineError
from steps.answers import extract_answer
from steps.splitting import SplitMode


def parse_processbench(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    """A ProcessBench line: its steps as given, gold labels up to and at the first error."""
    statement = text_of(obj, "problem")
    steps = steps_of({"steps": obj.get("steps")}, None, "explicit")
    first_error = obj.get("label")
    if type(first_error) is not int or not -1 <= first_error < len(steps):
        raise LineError("label", f"must be -1 or a step index below {len(steps)}, got {first_error!r}")
    correct = obj.get("final_answer_correct")
    if type(correct) is not bool:
        raise LineError("final_answer_correct", f"must be a boolean, got {prm800k.type_name(correct)}")
    bad = len(steps) if first_error == -1 else first_error
    soft = tuple(1.0 if i < bad else 0.0 if i == bad else None for i in range(len(steps)))
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=None, ground_truth_solution=None,
        steps=steps, final_answer=extract_answer(steps[-1]),
        generator=text_of(obj, "generator", required=False, max_length=100) or "",
        meta={"id": obj["id"]} if isinstance(obj.get("id"), str) else {}, given_is_correct=correct,
        imported_labels=ImportedLabels("processbench", "gold", soft),
    )


FORMAT = ImportFormat(
    name="processbench",
    help='ProcessBench {"problem", "steps", "label"} (gold first-error labels)',
    parse=parse_processbench,
    detect=lambda obj: "steps" in obj and "final_answer_correct" in obj and "label" in obj,
    detect_rank=20,
)
