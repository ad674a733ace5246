"""The dataset card (README.md) of a Parquet or `datasets` export: what each column means,
how labels were decided, the neutral rule, and what was read and left out."""
from __future__ import annotations

from django.utils import timezone

from annotate.pool import prm800k
from annotate.pool.exporting.formats import FORMAT_HELP, PER_SOLUTION, ExportTally
from annotate.pool.exporting.options import ExportOptions

# What a human row's annotators saw of the model (formats.assistance_of).
ASSISTANCE = ("`mode`: `blind`, `second_look` or `suggest` (`mixed` when the row's annotations differ); "
              "`second_look`: whether a step got the \"look again?\" prompt; null in automatic rows")
COLUMNS: dict[str, dict[str, str]] = {
    "prm800k": {
        "labeler": "the annotator's id", "timestamp": "when the label was made",
        "generation": "the queue generation the task came from",
        "is_quality_control_question": "a quality-control task with a known answer",
        "is_initial_screening_question": "a screening task",
        "question": "problem, ground truth, the pool's steps (`pre_generated_steps`) and answer",
        "label": "per step: the completions shown with their rating (-1, 0, +1) and flag, the human "
                 "completion written, the chosen completion (null where the human completion was gone on "
                 "from); total time (ms, always a whole number for tasks labeled here); the finish reason",
    },
    "trl": {
        "prompt": "the problem",
        "completions": "the steps of a path, one string each (do not join: a step may hold newlines)",
        "labels": "per step, whether it is good",
        "assistance": ASSISTANCE,
        "label_source": "`human` (annotators) or `automatic` (rollouts or an imported dataset; good when "
                        "K > 0 of the step's rollouts reached the answer)",
    },
    "processbench": {
        "id": "`SOURCE-SOLUTION_ID`", "generator": "the model that wrote the solution",
        "problem": "the problem", "steps": "the solution's steps",
        "final_answer_correct": "whether its final answer grades as correct",
        "label": "the index of the first wrong step; -1 when every step is correct",
        "assistance": ASSISTANCE,
    },
    "soft": {
        "id": "the solution's id", "problem": "the problem", "steps": "the solution's steps",
        "k": "per step, annotators who rated it good (automatic rows: rollouts that reached the answer)",
        "n": "per step, annotators who rated it (automatic rows: rollouts made; an imported verdict is 1)",
        "soft_labels": "per step, k/n (null where nobody rated the step)",
        "annotations": "annotations read for the solution (0 in automatic rows)",
        "assistance": ASSISTANCE,
        "label_source": "`human` (annotators) or `automatic` (rollouts or an imported dataset), never mixed",
    },
}

SEMANTICS = {
    "prm800k": "The annotators' ratings as given: +1 good, 0 neutral (reasonable but no progress), "
               "-1 bad; a task ends at the first -1 unless the project has annotators rate every step. "
               "A step the annotator rewrote keeps its -1 completion, holds the rewrite in "
               "`human_completion` and has `chosen_completion` null, as in PRM800K's phase 1. "
               "`total_time` is the active time the labeling page measured, else (no time reported) the "
               "time from claim to submit; the counts below say how many lines have each. The neutral "
               "rule below does not apply: 0 stays 0.",
    "trl": "One row per rejected alternative and one per walked path, as TRL's PRM800K converter "
           "writes them; each path ends at the first bad or unrated step. Labels read the verdict of "
           "the very text in the row (chosen, human-written or stopped-at completion): a step the "
           "annotator rewrote is False in the row ending at it, and its rewrite is True in the path, "
           "which goes on with the steps rated after it. Train with trl 1.13: `from trl.experimental.prm "
           "import PRMConfig, PRMTrainer` (not in trl's top-level package); trl 1.14 and later ship no PRM "
           "trainer, so pin `trl<=1.13`.",
    "processbench": "One row per solution whose deciding annotations agree on the first error (or "
                    "a reviewer decided it); a -1 rating is an error. An annotation rating every step "
                    "correct of a solution whose answer grades as wrong is left out "
                    "(`answer_contradicts_labels`): the review page lists it.",
    "soft": "Per pool step, of the annotators who rated that very text (up to each one's first error), "
            "how many rated it good.",
}


AUTOMATIC_SEMANTICS = {
    "prm800k": "Each step also has `auto_labels`: the automatic labels of the pool step at that index, one per "
               "run (source, method, kind, n_rollouts, n_correct, soft); PRM800K readers ignore the key.",
    "trl": "Automatic rows: a solution's steps up to its first unlabeled one, good when K > 0 of the "
           "rollouts from the step reached the answer (Math-Shepherd's hard estimate; an imported verdict "
           "is one vote), steps after a bad one kept as TRL's Math-Shepherd converter keeps them.",
    "soft": "Automatic rows: per step, K and N pooled over the automatic runs that labeled it (an imported "
            "verdict is one vote, 1 of 1 or 0 of 1); soft_labels = K/N.",
}


def type_name(feature) -> str:
    """A short type for the card: `string`, `list[bool]`, `struct{text, rating}`."""
    if isinstance(feature, dict):
        return "struct{" + ", ".join(feature) + "}"
    inner = getattr(feature, "feature", None)
    if inner is not None:
        return f"list[{type_name(inner)}]"
    return getattr(feature, "dtype", type(feature).__name__)


def dataset_card(*, format: str, container: str, options: ExportOptions, tally: ExportTally, rows: int,
                 features) -> str:
    unit = "solutions" if format in PER_SOLUTION else "annotations"
    neutral = "good (+1 and 0 are good)" if options.neutral_is_good else "bad (only +1 is good)"
    left_out = ", ".join(f"{n} {reason}" for reason, n in sorted(tally.skipped.items())) or "none"
    lines = ["---", f"pretty_name: Stepwise {format} export", "tags:", "- process-reward-model", "- step-labels"]
    if container == "parquet":
        lines += ["configs:", "- config_name: default", "  data_files:", "  - split: train",
                  "    path: data/train.parquet"]
    lines += ["---", "", f"# Stepwise export: {format}", "",
              f"{FORMAT_HELP[format]}. Written by Stepwise on {timezone.now():%Y-%m-%d %H:%M} UTC.", "",
              "## Features", "", "| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | `{type_name(feature)}` | {COLUMNS[format].get(name, '')} |"
              for name, feature in features.items()]
    automatic = [AUTOMATIC_SEMANTICS[format], ""] if options.labels != "human" and format in AUTOMATIC_SEMANTICS else []
    lines += ["", "## Labels", "", SEMANTICS[format], "", *automatic,
              f"**Neutral rule**: a neutral (0) rating counts as {neutral}.", "",
              f"**Label source**: {options.labels} (`human`: annotators only; `automatic`: automatic "
              "labels by rollouts or imported, never mixed with human ones; `both`: each row says which).", "",
              "## Counts", "", f"- rows: {rows}", f"- {unit} read: {tally.read}", f"- left out: {left_out}",
              *_total_time_counts(tally), "",
              "## Selection", "",
              f"- generations: {', '.join(map(str, options.generations)) or 'all'}",
              f"- since: {options.since.isoformat() if options.since else 'any time'}",
              f"- quality-control tasks: {'included' if options.include_qc else 'left out'}",
              f"- finish reasons: {', '.join(options.finish_reasons) or 'all'}", "",
              "## Loading", "", "```python", *_loading(container), "```", ""]
    return "\n".join(lines)


TOTAL_TIME_SOURCES = {
    prm800k.ACTIVE: "the active time the labeling page measured",
    prm800k.CLAIM_TO_SUBMIT: "no time reported: from the claim to the submit",
    prm800k.IMPORTED: "the imported line's own value",
}


def _total_time_counts(tally: ExportTally) -> list[str]:
    if not tally.total_time:
        return []
    return ["- `total_time`: " + "; ".join(f"{n} {TOTAL_TIME_SOURCES.get(source, source)}"
                                            for source, n in sorted(tally.total_time.items()))]


def _loading(container: str) -> list[str]:
    if container == "parquet":
        return ["from datasets import load_dataset",
                'rows = load_dataset("parquet", data_files="data/train.parquet")["train"]']
    return ["from datasets import load_from_disk", 'rows = load_from_disk("THIS_FOLDER")']
