"""``math_shepherd``: peiyi9979/Math-Shepherd's ``{"input", "label", "task"}``: the problem, then
``Step 1: ...`` steps each closed by the tag ``ки``; ``label`` is the same text with ``+`` or ``-``
in each tag's place. Its labels are stored as automatic labels (by rollouts: soft 1.0 / 0.0 per
step), never as human ones (``ImportedLabels``)."""
import re

from annotate.pool.importing.formats.base import ImportedLabels, ImportFormat, Record, text_of
from annotate.pool.prm800k import LineError
from steps.answers import extract_answer
from steps.splitting import SplitMode

MATH_SHEPHERD_TAG = "ки"
_FIRST_STEP = re.compile(r"\bstep 1\s*:", re.IGNORECASE)


def parse_math_shepherd(obj: dict, line_no: int, *, split_mode: SplitMode = "auto") -> Record:
    """A Math-Shepherd line: the text before ``Step 1:`` is the problem, each tag closes a step.

    The label text must be the input with ``+`` or ``-`` at each tag, so a label read from a
    shifted or edited line is refused rather than put on the wrong step. The last step's label
    is the final answer's grade: Math-Shepherd labels a complete solution by its answer.
    """
    text, label = text_of(obj, "input"), text_of(obj, "label")
    pieces = text.split(MATH_SHEPHERD_TAG)
    if len(pieces) < 2 or pieces[-1].strip():
        raise LineError("input", f"must end each step with the tag '{MATH_SHEPHERD_TAG}' (text follows the last tag)")
    signs = _signs(pieces, label)
    first = _FIRST_STEP.search(pieces[0])
    if first is None:
        raise LineError("input", "has no 'Step 1:' where the problem ends and the steps begin")
    statement = pieces[0][:first.start()].strip()
    steps = [pieces[0][first.start():].strip(), *(piece.strip() for piece in pieces[1:-1])]
    if not statement or not all(steps):
        raise LineError("input", "has an empty problem or an empty step between tags")
    task = obj.get("task")
    return Record(
        line_no=line_no, statement=statement, ground_truth_answer=None, ground_truth_solution=None,
        steps=steps, final_answer=extract_answer(steps[-1]), generator="math-shepherd",
        meta={"task": task} if isinstance(task, str) else {}, given_is_correct=signs[-1] == "+",
        imported_labels=ImportedLabels("math-shepherd", "automatic", tuple(1.0 if s == "+" else 0.0 for s in signs)),
    )


def _signs(pieces: list[str], label: str) -> list[str]:
    """The ``+`` or ``-`` the label puts at each tag of the input (cut at its tags into `pieces`)."""
    signs: list[str] = []
    position = 0
    for piece in pieces[:-1]:
        position += len(piece)
        sign = label[position:position + 1]
        if sign not in ("+", "-") or label[position - len(piece):position] != piece:
            raise LineError("label", f"does not match 'input' at step tag {len(signs) + 1}: expected the "
                                     f"input's text with '+' or '-' at each '{MATH_SHEPHERD_TAG}'")
        signs.append(sign)
        position += 1
    if label[position:] != pieces[-1]:
        raise LineError("label", "does not match 'input' after the last step tag")
    return signs


FORMAT = ImportFormat(
    name="math_shepherd",
    help='Math-Shepherd {"input", "label"} with "ки" step tags (automatic labels)',
    parse=parse_math_shepherd,
    detect=lambda obj: isinstance(obj.get("input"), str) and MATH_SHEPHERD_TAG in obj["input"] and "label" in obj,
    detect_rank=10,
)
