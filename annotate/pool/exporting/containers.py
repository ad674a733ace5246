"""Datasets out for the Hugging Face stack: every format as Parquet or a `datasets` folder.

The rows are the JSONL export's rows (`rows.iter_rows`), written through the fixed Arrow
schema their format gives (`ExportFormat.features`), so an empty export and a column that is
null in one chunk keep their types. A `parquet` export is a folder as the Hub lays one out (`README.md`, the dataset
card, and `data/train.parquet`), loadable with `load_dataset("parquet", data_files=...)`;
an `hf_dataset` export is `Dataset.save_to_disk`'s folder plus the card, loadable with
`load_from_disk`. `datasets` is imported only here (and by `ArrowTypes`), in the worker or the command.
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from annotate.models import Project
from annotate.pool.exporting.cards import dataset_card
from annotate.pool.exporting.formats.base import ArrowTypes, ExportFormat, ExportTally
from annotate.pool.exporting.options import CHUNK_SIZE, ExportOptions
from annotate.pool.exporting.rows import check_labels, iter_rows

PARQUET_FILE = Path("data") / "train.parquet"


def features(format: ExportFormat, *, labels: str = "human"):
    """The `datasets.Features` of a format's rows (extras only when the export asks for them)."""
    from datasets import Features  # datasets: pyarrow and pandas, for export jobs only, never the web

    return Features(format.features(ArrowTypes.load(), labels != "human"))


def write_parquet(*, path: Path, format: ExportFormat, rows: Iterable[dict], schema, on_row: Callable[[], None]) -> int:
    # pyarrow: datasets' columnar backend, tens of MB; only an export job writes Parquet.
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict] = []
        for row in rows:
            batch.append(format.arrow_row(row))
            on_row()
            if len(batch) == CHUNK_SIZE:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                written, batch = written + len(batch), []
        if batch:  # An empty export has the schema and no row group (datasets refuses an empty one).
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            written += len(batch)
    return written


def write_dataset_folder(
    *, project: Project, folder: Path, format: str, container: str, options: ExportOptions, tally: ExportTally,
    on_row: Callable[[], None],
) -> int:
    """Write the export into the empty `folder`: the card and Parquet or Arrow data. Returns rows."""
    found = check_labels(format, options)
    row_features = features(found, labels=options.labels)
    rows = iter_rows(project=project, format=format, options=options, tally=tally)
    if container == "parquet":
        (folder / PARQUET_FILE).parent.mkdir(parents=True)
        count = write_parquet(path=folder / PARQUET_FILE, format=found, rows=rows,
                              schema=row_features.arrow_schema, on_row=on_row)
    else:
        count = _write_arrow_folder(folder=folder, format=found, rows=rows, features=row_features, on_row=on_row)
    card = dataset_card(format=found, container=container, options=options, tally=tally, rows=count,
                        features=row_features)
    (folder / "README.md").write_text(card, encoding="utf-8")
    return count


def _write_arrow_folder(*, folder: Path, format: ExportFormat, rows: Iterable[dict], features, on_row) -> int:
    """`save_to_disk` of a Dataset read from a Parquet file written a chunk at a time, so the rows
    are never all in memory as Python objects."""
    from datasets import Dataset  # datasets: pyarrow and pandas, for export jobs only, never the web

    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".arrow-") as scratch:
        parquet = Path(scratch) / "rows.parquet"
        count = write_parquet(path=parquet, format=format, rows=rows, schema=features.arrow_schema, on_row=on_row)
        if count:
            dataset = Dataset.from_parquet(str(parquet), cache_dir=str(Path(scratch) / "cache"), features=features)
        else:  # The Parquet reader finds no data in a file with no rows; the typed empty table is it.
            dataset = Dataset.from_dict({name: [] for name in features}, features=features)
        # One shard at least: with none, load_from_disk cannot rebuild an empty table.
        dataset.save_to_disk(str(folder), num_shards=None if count else 1)
        del dataset
    return count


def zip_folder(*, folder: Path, path: Path, top: str) -> None:
    """`folder` zipped into `path`, its files under `top/` so that unzipping gives one folder."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".zip-") as scratch:
        staged = Path(scratch) / top
        folder.rename(staged)
        archive = shutil.make_archive(str(Path(scratch) / "export"), "zip", root_dir=scratch, base_dir=top)
        Path(archive).replace(path)
