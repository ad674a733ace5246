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
from annotate.pool.exporting.loading import AnnotationRecord
from annotate.pool.exporting.options import ExportOptions

# What a human row's annotators saw of the model (`assistance_of`), as the card explains it.
ASSISTANCE = ("`mode`: `blind`, `second_look` or `suggest` (`mixed` when the row's annotations differ); "
              "`second_look`: whether a step got the \"look again?\" prompt; null in automatic rows")

Unit = Literal["annotations", "solutions"]


@dataclass
class ExportTally:
    """What an export read and what it left out, by reason: the job summary. `total_time`
    counts PRM800K lines by where their `total_time` came from (`prm800k.total_time`)."""

    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    total_time: Counter = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def report(self) -> dict:
        """What the export says of its lines beyond what it left out (ExportJob.report)."""
        return {"total_time": dict(sorted(self.total_time.items()))} if self.total_time else {}


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
    # A row as its Arrow schema holds it (PRM800K allows a human completion given as bare text).
    arrow_row: Callable[[dict], dict] = _as_is

    @property
    def title(self) -> str:
        """The format as people write it: "ProcessBench"."""
        return self.help.partition(":")[0]

    @property
    def per_solution(self) -> bool:
        return self.unit == "solutions"




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

