"""What an export format is (`ExportFormat`), and what every format's rows share: the tally of
what was read and left out, the neutral rule, the verdicts an annotation gives, and what its
annotators saw of the model.

The formats are about verdicts (which rating of a step counts, where the first error is), and
read them only through `annotate.labeling.verdicts`, so they say what training, QC and review
say. Every human row says what its annotators saw of the model (`assistance`, read from the
ratings' records of `annotate.labeling.assistance`), so a dataset can be filtered by it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from annotate.labeling import assistance, verdicts
from annotate.models import Project
from annotate.pool.exporting import loading
from annotate.pool.exporting.loading import AnnotationRecord
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions

# What a human row's annotators saw of the model (`assistance_of`), as the card explains it.
ASSISTANCE = ("`mode`: `blind`, `second_look` or `suggest` (`mixed` when the row's annotations differ); "
              "`second_look`: whether a step got the \"look again?\" prompt; null in automatic rows")

Unit = Literal["annotations", "solutions"]

# A consensus export's steps by outcome (`exporting.sourced`), in the card's order. `seen` is every
# step up to a solution's first agreed bad one; the steps after it are counted apart, never labeled.
CONSENSUS_OUTCOMES = {
    "seen": "steps seen (up to each solution's first agreed bad step)",
    "kept_good": "kept as good (every source said good)",
    "kept_bad": "kept as bad (every source said bad)",
    "silent": "dropped: a source said nothing of the step",
    "disagreed": "dropped: the sources disagreed",
    "after_first_error": "after the first agreed bad step (not labeled, as in PRM800K)",
}


@dataclass
class ExportTally:
    """What an export read and what it left out, by reason: the job summary. `total_time`
    counts PRM800K lines by where their `total_time` came from (`prm800k.total_time`)."""

    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    total_time: Counter = field(default_factory=Counter)
    # A consensus export's steps by outcome (`CONSENSUS_OUTCOMES`): what the card says each rule kept.
    consensus: Counter = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def report(self) -> dict:
        """What the export says of its lines beyond what it left out (ExportJob.report)."""
        report = {}
        if self.total_time:
            report["total_time"] = dict(sorted(self.total_time.items()))
        if self.consensus:
            report["consensus"] = {outcome: self.consensus[outcome] for outcome in CONSENSUS_OUTCOMES}
        return report


class Rows(Protocol):
    """A format's rows from the selected annotations (human labels, or both for PRM800K's extras)."""

    def __call__(self, *, project: Project, options: ExportOptions, tally: ExportTally,
                 chunk_size: int = ...) -> Iterator[dict]: ...


class AutomaticRows(Protocol):
    """A format's rows from automatic labels: every solution of the project that has some."""

    def __call__(self, *, project: Project, tally: ExportTally, chunk_size: int = ...) -> Iterator[dict]: ...


@dataclass(frozen=True)
class ArrowTypes:
    """`datasets`' column types, handed to a format's `features` (imported only for a dataset
    container: `datasets` brings pyarrow and pandas, for export jobs only, never the web)."""

    text: Any
    integer: Any
    number: Any
    boolean: Any
    list_of: Callable[[Any], Any]

    @classmethod
    def load(cls) -> ArrowTypes:
        from datasets import List, Value

        return cls(Value("string"), Value("int64"), Value("float64"), Value("bool"), List)

    @property
    def assistance(self) -> dict:
        """The `assistance` column of a human row (`assistance_of`)."""
        return {"assistance": {"mode": self.text, "second_look": self.boolean}}


def _as_is(row: dict) -> dict:
    return row


@dataclass(frozen=True)
class ExportFormat:
    """One export format: everything the page, the command, the API, the job, the containers and
    the dataset card know of it. A new format is a module that builds one and a line in the
    registry (`annotate.pool.exporting.formats`)."""

    name: str
    help: str  # one line, "Title: what a row is": the page's choice, the card's summary
    unit: Unit  # what one row is made from, and what an export job's progress counts
    rows: Rows
    # The column types of its rows (`ArrowTypes`, whether the export carries automatic labels).
    features: Callable[[ArrowTypes, bool], dict]
    columns: Mapping[str, str]  # the dataset card's meaning of each column
    semantics: str  # the dataset card's "Labels" section
    # Rows from automatic labels (`labels=automatic|both`); None where `rows` itself handles
    # them or the format takes none.
    automatic_rows: AutomaticRows | None = None
    automatic_semantics: str = ""  # the card's words on automatic labels, when the export has them
    # Why the format takes human labels only (empty: it takes automatic labels too).
    human_only: str = ""
    # Rows from a verifier model's labels or from the steps where sources agree (`labels=judge|consensus`,
    # read through `exporting.sourced`); None where the format takes neither.
    sourced_rows: Rows | None = None
    sourced_semantics: str = ""  # the card's words on judge and consensus rows, when the export has them
    # The `labels` options it takes (`options.LABEL_SOURCES`) unless `human_only`.
    label_sources: tuple[str, ...] = ("human", "automatic", "both")
    # A row as its Arrow schema holds it (PRM800K allows a human completion given as bare text).
    arrow_row: Callable[[dict], dict] = _as_is

    @property
    def title(self) -> str:
        """The format as people write it: "ProcessBench"."""
        return self.help.partition(":")[0]

    @property
    def per_solution(self) -> bool:
        return self.unit == "solutions"

    def takes(self, labels: str) -> bool:
        """Whether it can write the `labels` asked for (a format for human labels only takes no other)."""
        return labels == "human" or (not self.human_only and labels in self.label_sources)


def assistance_of(annotations: list[AnnotationRecord]) -> dict:
    """What the annotators of a row saw of the model (assistance.summary of their ratings' records)."""
    return assistance.summary(label.assistance for a in annotations for label in a.step_labels.all())


def labeled(annotation: AnnotationRecord, tally: ExportTally, *, trainable: bool = True) -> verdicts.Verdicts | None:
    """The annotation's verdicts, or None (counted) when it has none to give: a bad problem says
    nothing about its steps, and a finish reason its ratings contradict is never exported
    (`Verdicts.withheld`, the rule training rows follow too)."""
    verdict = verdicts.verdicts(annotation)
    reason = verdict.withheld(annotation.finish_reason, trainable=trainable)
    if reason is not None:
        tally.skip(reason)
        return None
    return verdict



def labeled_annotations(*, project: Project, options: ExportOptions, tally: ExportTally,
                        chunk_size: int = CHUNK_SIZE) -> Iterator[tuple[AnnotationRecord, verdicts.Verdicts]]:
    """The selected annotations, each counted as read, with their verdicts; those with none to give
    are left out (counted, `labeled`). What a format with a row per annotation walks."""
    for annotation in loading.annotations(project=project, options=options, chunk_size=chunk_size):
        tally.read += 1
        verdict = labeled(annotation, tally)
        if verdict is not None:
            yield annotation, verdict
