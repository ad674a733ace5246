"""``gsm8k``: ``{"question", "answer"}``, the answer's last line ``#### N``; the reference solution
becomes the problem's ground truth and a known-correct solution."""
from annotate.pool.importing.formats.base import ImportFormat, Record, steps_of, text_of
from annotate.pool.prm800k import LineError
from steps.answers import extract_answer
from steps.splitting import SplitMode


def parse_gsm8k(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    question = text_of(obj, "question")
    answer = text_of(obj, "answer")
    final = extract_answer(answer)
    if "####" not in answer or final is None:
        raise LineError("answer", "has no final line '#### N'")
    return Record(
        line_no=line_no, statement=question, ground_truth_answer=final, ground_truth_solution=answer,
        # GSM8K writes one step per line, with or without blank lines between them.
        steps=steps_of(obj, answer, "line" if split_mode == "auto" else split_mode), final_answer=final,
        is_reference=True, generator="reference",
    )


FORMAT = ImportFormat(
    name="gsm8k",
    help='{"question", "answer"} with "#### N"',
    parse=parse_gsm8k,
    detect=lambda obj: "question" in obj and isinstance(obj.get("answer"), str) and "####" in obj["answer"],
    detect_rank=50,
)
