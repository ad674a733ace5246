"""``prm800k``: openai/prm800k lines with their labels (the schema: ``annotate.pool.prm800k``);
the labels become annotations, with their labeler ids."""
from annotate.pool import prm800k
from annotate.pool.importing.formats.base import ImportFormat, Record
from steps.splitting import SplitMode


def parse_prm800k(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    line = prm800k.parse_line(obj, line_no)
    return Record(
        line_no=line_no, statement=line.problem, ground_truth_answer=line.ground_truth_answer,
        ground_truth_solution=line.ground_truth_solution, steps=line.solution_steps(),
        final_answer=line.final_answer(), generator="prm800k",
        pre_generated_answer=line.pre_generated_answer,
        pre_generated_verifier_score=line.pre_generated_verifier_score, labels=line,
    )


FORMAT = ImportFormat(
    name="prm800k",
    help="openai/prm800k lines, with their labels",
    parse=parse_prm800k,
    detect=lambda obj: isinstance(obj.get("question"), dict) and "label" in obj,
    detect_rank=30,
)
