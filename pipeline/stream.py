"""One cluster's record stream, built in the data source from Arrow columns: the
source-side form of `pipeline.transforms.dedupe`.

Owns: `cluster_stream` (a cluster's rows -> its stream rows plus every error row),
`NEEDED_COLUMNS` (the columns it reads to decide) and `broker_rows` (which rows the
broker timeline is built from).

Rules kept here:
- The rows kept are exactly `dedupe`'s (pipeline/transforms.py, whose module docstring
  says which copy of a record is kept and why), decided by the same keys with the same
  null and tie rules: per log offset the copy with the highest leader epoch (nulls
  last), then the lowest node id (nulls last), then the smallest file; the log start is
  the lowest log offset; one snapshot per cluster, the oldest that reaches the log start
  else the newest, then node id, then file; its records below the log start, and its
  FeatureLevelRecords at or above it that no kept log FeatureLevelRecord of the same
  feature before the snapshot's end overrides, moved to log start - 1. The kept rows'
  columns are those of the copy kept. tests/pipeline_source/test_stream.py compares
  this with `dedupe` over Spark on fleets with damaged, differing and missing copies.
- Every error row of every file is kept as it is (the `errors` table counts them);
  rows that are neither good nor errors (no record type) are dropped, as by `dedupe`.
- Input: every row of ONE cluster (any subset of its byte-identical copies may be
  missing, see pipeline/columnar.py: they cannot change the answer). No Python object
  per row: the per-offset choice is Arrow compute over the columns; only the few
  snapshot files and FeatureLevelRecords are looked at one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.schema import BROKER_RECORDS, FEATURE_LEVEL_RECORD

SNAPSHOT_CONTROL_RECORDS = ("SnapshotHeader", "SnapshotFooter")
SOURCE_LOG = "log"
SOURCE_SNAPSHOT = "snapshot"

# What the choice reads, whatever columns the caller wants back.
NEEDED_COLUMNS = ("node_id", "source", "file", "offset", "leader_epoch", "record_type", "feature", "error")


def broker_rows(rows: pa.Table) -> pa.ChunkedArray:
    """True for the rows the broker timeline is built from: a broker record type with a
    `broker` struct (pipeline/transforms.py `broker_rows`, the same predicate in Spark).
    Never null: error rows (no record type) are false."""
    is_broker = pc.is_in(rows["record_type"], value_set=pa.array(BROKER_RECORDS, pa.string()))
    return pc.and_(is_broker, pc.is_valid(rows["broker"]))


def _new_key(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """For sorted `values`: true where a row starts a new run of equal values (nulls
    equal each other and differ from every value, as in a Spark window partition)."""
    n = len(values)
    if n == 0:
        return pa.array([], pa.bool_())
    head, tail = values[1:], values[:-1]
    differ = pc.not_equal(head, tail)
    # Where either side is null, the rows differ exactly when only one of them is.
    differ = pc.if_else(pc.is_null(differ), pc.not_equal(pc.is_null(head), pc.is_null(tail)), differ)
    return pa.concat_arrays([pa.array([True]), pc.fill_null(differ, False).combine_chunks()
                             if isinstance(differ, pa.ChunkedArray) else pc.fill_null(differ, False)])


def _strictly_increasing(values: pa.ChunkedArray) -> bool:
    """No null, each value above the one before: the copies held no two rows of an offset."""
    if values.null_count or len(values) < 2:
        return values.null_count == 0
    return bool(pc.all(pc.greater(values[1:], values[:-1])).as_py())


def _log_rows(log: pa.Table) -> pa.Table:
    """One row per offset: `dedupe`'s window (partition by offset; leader epoch desc
    nulls last, node id asc nulls last, file asc), first row of each."""
    if _strictly_increasing(log["offset"]):
        return log  # one copy per offset already (the usual case once twins are skipped)
    # A null file would sort first in Spark; no row of a file has one, "" stands for it.
    order = pc.sort_indices(
        pa.table({
            "offset": log["offset"],
            "leader_epoch": log["leader_epoch"],
            "node_id": log["node_id"],
            "file": pc.fill_null(log["file"], ""),
        }),
        # Nulls last for every key, whichever the direction (offset: a run of its own).
        sort_keys=[("offset", "ascending", "at_end"), ("leader_epoch", "descending", "at_end"),
                   ("node_id", "ascending", "at_end"), ("file", "ascending", "at_end")],
    )
    ordered = log.take(order)
    return ordered.filter(_new_key(ordered["offset"]))


def _null_first(value):
    return (0, None) if value is None else (1, value)


def _null_last(value):
    return (1, None) if value is None else (0, value)


def _chosen_snapshot(snapshot_rows: pa.Table, log_start: int | None) -> tuple[str | None, int | None] | None:
    """(file, end offset) of the one snapshot `dedupe` takes records from, or None."""
    if snapshot_rows.num_rows == 0:
        return None
    files = snapshot_rows.group_by(["file", "node_id"], use_threads=False).aggregate([("offset", "max")])
    best = None
    for file, node_id, last in zip(files["file"].to_pylist(), files["node_id"].to_pylist(),
                                   files["offset_max"].to_pylist()):
        end = None if last is None else last + 1
        reaches = end is not None and log_start is not None and end >= log_start
        # Spark's order: reaches desc; then end asc (reaching) or -end asc (not), nulls
        # first; node id asc nulls last; file asc nulls first.
        key = (0 if reaches else 1, _null_first(end if reaches or end is None else -end), _null_last(node_id),
               _null_first(file))
        if best is None or key < best[0]:
            best = (key, file, end)
    return best[1], best[2]


def _equal(column: pa.ChunkedArray, value) -> pa.ChunkedArray:
    if value is None:  # a join on a null key matches nothing
        return pc.and_(pc.is_valid(column), pc.is_null(column))
    return pc.equal(column, value)


def cluster_stream(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """`rows` (every row of one cluster's files, with at least NEEDED_COLUMNS and
    `columns`) -> the cluster's stream rows (`dedupe`'s) and every error row, as a table
    of `columns`. The stream rows come first, in offset order when the copies held no
    two rows of an offset."""
    error = rows["error"]
    record_type = rows["record_type"]
    source = rows["source"]
    # Filters drop rows whose condition is null, as Spark's where does.
    good = pc.and_(pc.is_null(error), pc.is_valid(record_type))
    log = rows.filter(pc.and_(good, pc.equal(source, SOURCE_LOG)))
    kept_log = _log_rows(log)
    log_start = pc.min(log["offset"]).as_py() if log.num_rows else None

    snapshot_rows = rows.filter(pc.and_(
        pc.and_(good, pc.equal(source, SOURCE_SNAPSHOT)),
        pc.invert(pc.is_in(record_type, value_set=pa.array(SNAPSHOT_CONTROL_RECORDS, pa.string()))),
    ))
    parts = [kept_log]
    chosen = _chosen_snapshot(snapshot_rows, log_start)
    if chosen is not None:
        file, end = chosen
        from_snapshot = snapshot_rows.filter(_equal(snapshot_rows["file"], file))
        offset = from_snapshot["offset"]
        if log_start is None:
            parts.append(from_snapshot)
        else:
            parts.append(from_snapshot.filter(pc.less(offset, log_start)))
            candidates = from_snapshot.filter(pc.and_(pc.greater_equal(offset, log_start),
                                                      pc.equal(from_snapshot["record_type"], FEATURE_LEVEL_RECORD)))
            if candidates.num_rows:
                parts.append(_carried_levels(candidates, kept_log, log_start, end))
    stream = pa.concat_tables([part.select(list(columns)) for part in parts])
    errors = rows.filter(pc.is_valid(error)).select(list(columns))
    return pa.concat_tables([stream, errors]) if errors.num_rows else stream


def _carried_levels(candidates: pa.Table, kept_log: pa.Table, log_start: int, end: int | None) -> pa.Table:
    """The snapshot's FeatureLevelRecords at or above the log start that no kept log
    FeatureLevelRecord of the same feature below the snapshot's end overrides, at
    offset log start - 1."""
    levels = kept_log.filter(pc.equal(kept_log["record_type"], FEATURE_LEVEL_RECORD))
    overridden = set()
    if end is not None:
        names = pc.struct_field(levels["feature"], "name").to_pylist() if levels.num_rows else []
        for name, offset in zip(names, levels["offset"].to_pylist()):
            if name is not None and offset is not None and offset < end:
                overridden.add(name)
    candidate_names = pc.struct_field(candidates["feature"], "name").to_pylist()
    keep = pa.array([name is None or name not in overridden for name in candidate_names], pa.bool_())
    carried = candidates.filter(keep)
    at = carried.schema.get_field_index("offset")
    return carried.set_column(at, carried.schema.field(at),
                              pa.array([log_start - 1] * carried.num_rows, carried.schema.field(at).type))
