"""A fleet's files as Arrow record batches, decoded in bulk: what the Spark data source
hands to Spark.

Owns: `file_batches` (one file as Arrow batches, optionally only some
columns), `group_batches` (the copies of one file held by several controllers),
`copy_groups` (which files are copies of each other) and `native_available`.

Rules kept here:
- Same rows as `pipeline.reader.read_file`, column for column. Two paths give them:
  * compiled (pipeline/_columnar.c, built by pip from the repository when a C compiler
    is there): runs of batches go straight from the file's bytes into Arrow buffers,
    with no Python object per row; every batch it does not accept (damaged, control,
    a record type or version it does not decode, non-ASCII text) is handed to
    `reader.step`, the Python reader's own code, so every error row is the Python
    reader's;
  * pure Python (no compiler, `KRAFTWERK_PIPELINE_NATIVE=0`, or when `fields_json` is
    asked for, which only the Python reader writes): `reader.read_file`'s rows, turned
    into columns in C by `zip` and pyarrow.
  tests/pipeline_source/test_columnar.py compares both on every record of fake fleets,
  damaged ones included.
- Copies (`distinct=True`): the controllers of a cluster hold copies of the same log.
  `dedupe` (pipeline/transforms.py) keeps, per (cluster, offset), the log row with the
  highest leader epoch, then the lowest node id, then the smallest file path; and one
  snapshot per cluster, the first by (reaches the log, end offset, node id, file).
  A file whose bytes equal those of a file of the same cluster and name that sorts
  before it by (node id, path) gives rows that equal that file's in everything but
  node_id / file: same offsets, same epochs, same records. Each of its good rows is
  therefore beaten by its twin's (same epoch, lower node id or path), so none can be
  kept by `dedupe`, the log start (the lowest kept offset) is the twin's, and a twin
  snapshot is never the one chosen. Skipping its good rows leaves every answer of the
  job as it was; its error rows (bad bytes are reported per file by `errors`) are
  still given, copied from its twin's with its own node id and path. The equality is
  checked byte for byte, never assumed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import reader
from pipeline.reader import FleetFile
from pipeline.schema import ARROW_SCHEMA, RECORD_FIELDS
from protocol.records import RECORD_TYPES

try:  # the compiled fast path is optional: without it the pure-Python path gives the same rows
    from pipeline import _columnar
except ImportError:  # pragma: no cover - depends on the build
    _columnar = None

NATIVE_ENV = "KRAFTWERK_PIPELINE_NATIVE"

_FEATURE_TYPE = ARROW_SCHEMA.field("feature").type
_BROKER_TYPE = ARROW_SCHEMA.field("broker").type

# The record type names by api key, for the compiled path's api key column.
_MAX_KEY = max(RECORD_TYPES)
_TYPE_NAMES = pa.array([RECORD_TYPES[k].name if k in RECORD_TYPES else None for k in range(_MAX_KEY + 1)],
                       pa.string())


def native_available() -> bool:
    """Whether the compiled fast path is built and not switched off
    (`KRAFTWERK_PIPELINE_NATIVE=0`)."""
    return _columnar is not None and os.environ.get(NATIVE_ENV, "1") != "0"


def schema_for(columns: Sequence[str]) -> pa.Schema:
    return pa.schema([ARROW_SCHEMA.field(name) for name in columns])


# --------------------------------------------------------------------------
# rows -> Arrow (the pure-Python path, and the batches the compiled path hands back)
# --------------------------------------------------------------------------

_INDEX = {name: i for i, name in enumerate(RECORD_FIELDS)}


def rows_to_batch(rows: list[tuple], columns: Sequence[str]) -> pa.RecordBatch:
    """`reader` rows (full RECORD_FIELDS tuples) as one batch of `columns`."""
    schema = schema_for(columns)
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=schema)
    # zip(*rows) turns the rows into columns in C; pyarrow converts each column in C.
    transposed = list(zip(*rows))
    arrays = [pa.array(transposed[_INDEX[name]], type=schema.field(name).type) for name in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------
# the compiled path's buffers -> Arrow
# --------------------------------------------------------------------------

(_OFFSET, _EPOCH, _TIMESTAMP, _API_KEY, _VERSION, _FEAT_VALID, _FEAT_NAME_OFF, _FEAT_NAME, _FEAT_LEVEL,
 _BRK_VALID, _BRK_ID, _BRK_EPOCH, _INC_VALID, _INC_OFF, _INC, _FENCED_VALID, _FENCED, _ICS_VALID, _ICS,
 _RACK_VALID, _RACK_OFF, _RACK, _MVMIN_VALID, _MVMIN, _MVMAX_VALID, _MVMAX, _DIRS_VALID, _DIRS_OFF, _DIR_OFF,
 _DIR) = range(30)


def _buf(data: bytes) -> pa.Buffer:
    return pa.py_buffer(data)


def _fixed(kind: pa.DataType, n: int, data: bytes, validity: bytes | None = None) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [None if validity is None else _buf(validity), _buf(data)])


def _strings(n: int, validity: bytes | None, offsets: bytes, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(pa.string(), n, [None if validity is None else _buf(validity), _buf(offsets),
                                                  _buf(data)])


def _native_column(name: str, n: int, b: tuple, ctx_prefix: tuple) -> pa.Array:
    kind = ARROW_SCHEMA.field(name).type
    if name in ("cluster", "cluster_id", "node_id", "source", "file"):
        value = ctx_prefix[_INDEX[name]]
        return pa.nulls(n, kind) if value is None else pa.repeat(pa.scalar(value, kind), n)
    if name == "offset":
        return _fixed(pa.int64(), n, b[_OFFSET])
    if name == "leader_epoch":
        return _fixed(pa.int32(), n, b[_EPOCH])
    if name == "batch_timestamp_ms":
        return _fixed(pa.int64(), n, b[_TIMESTAMP])
    if name == "record_type":
        return pc.take(_TYPE_NAMES, _fixed(pa.int16(), n, b[_API_KEY]))
    if name == "record_version":
        return _fixed(pa.int32(), n, b[_VERSION])
    if name == "feature":
        children = [_strings(n, None, b[_FEAT_NAME_OFF], b[_FEAT_NAME]), _fixed(pa.int32(), n, b[_FEAT_LEVEL])]
        return pa.Array.from_buffers(_FEATURE_TYPE, n, [_buf(b[_FEAT_VALID])], children=children)
    if name == "broker":
        items = pa.Array.from_buffers(pa.string(), (len(b[_DIR_OFF]) // 4) - 1,
                                      [None, _buf(b[_DIR_OFF]), _buf(b[_DIR])])
        log_dirs = pa.Array.from_buffers(_BROKER_TYPE.field("log_dirs").type, n,
                                         [_buf(b[_DIRS_VALID]), _buf(b[_DIRS_OFF])], children=[items])
        children = [
            _fixed(pa.int32(), n, b[_BRK_ID]),
            _fixed(pa.int64(), n, b[_BRK_EPOCH]),
            _strings(n, b[_INC_VALID], b[_INC_OFF], b[_INC]),
            _fixed(pa.bool_(), n, b[_FENCED], b[_FENCED_VALID]),
            _fixed(pa.bool_(), n, b[_ICS], b[_ICS_VALID]),
            _strings(n, b[_RACK_VALID], b[_RACK_OFF], b[_RACK]),
            _fixed(pa.int32(), n, b[_MVMIN], b[_MVMIN_VALID]),
            _fixed(pa.int32(), n, b[_MVMAX], b[_MVMAX_VALID]),
            log_dirs,
        ]
        return pa.Array.from_buffers(_BROKER_TYPE, n, [_buf(b[_BRK_VALID])], children=children)
    if name == "error":
        return pa.nulls(n, pa.string())
    raise ValueError(f"the compiled path does not produce column {name!r}")


def _native_batch(n: int, buffers: tuple, prefix: tuple, columns: Sequence[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([_native_column(name, n, buffers, prefix) for name in columns],
                                      schema=schema_for(columns))


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------

def _uses_native(columns: Sequence[str], native: bool | None) -> bool:
    if native is None:
        native = native_available()
    # fields_json is written only by the Python reader (every field of every record type).
    return native and _columnar is not None and "fields_json" not in columns


def _file_parts(f: FleetFile, columns: Sequence[str], native: bool, data: bytes | None = None
                ) -> tuple[bytes | None, list[pa.RecordBatch], list[tuple]]:
    """(the file's bytes or None, its batches, its error rows as reader tuples). `data`:
    the file's bytes when already read."""
    ctx, data, state, failure = reader.open_file(f, data)
    if failure is not None:
        return None, [rows_to_batch([failure], columns)], [failure]
    batches: list[pa.RecordBatch] = []
    errors: list[tuple] = []
    pending: list[tuple] = []  # rows of the Python reader, gathered into one batch
    error_index = _INDEX["error"]
    prefix = ctx.prefix
    snapshot_last = ctx.snapshot_last_offset
    is_log = snapshot_last is None
    # Bounded: every round moves state.position forward (compiled run or one step) or ends.
    while not state.done and state.position < len(data):
        if native:
            n, buffers, position, expected, last_epoch = _columnar.decode_run(
                data, state.position, is_log, state.expected_offset, state.last_epoch,
                -1 if snapshot_last is None else snapshot_last)
            if n:
                if pending:
                    batches.append(rows_to_batch(pending, columns))
                    pending = []
                batches.append(_native_batch(n, buffers, prefix, columns))
            state.position, state.expected_offset, state.last_epoch = position, expected, last_epoch
            if state.position >= len(data):
                break
        rows = reader.step(ctx, data, state)
        pending.extend(rows)
        errors.extend(row for row in rows if row[error_index] is not None)
    if pending:
        batches.append(rows_to_batch(pending, columns))
    return data, batches, errors


def file_batches(f: FleetFile, columns: Sequence[str] = RECORD_FIELDS, native: bool | None = None
                 ) -> list[pa.RecordBatch]:
    """The rows `reader.read_file(f)` gives, as Arrow batches of `columns` (a subset of
    RECORD_FIELDS, in any order). `native`: None = the compiled path when available."""
    return _file_parts(f, columns, _uses_native(columns, native))[1]


# --------------------------------------------------------------------------
# copies
# --------------------------------------------------------------------------

def copy_key(f: FleetFile) -> tuple[str, str]:
    """Files with the same key may be copies of each other: same cluster, same name."""
    return f.cluster, os.path.basename(f.path)


def copy_groups(files: Iterable[FleetFile]) -> list[tuple[FleetFile, ...]]:
    """`files` grouped by `copy_key`, each group in dedupe's preference order (node id,
    then path), the groups in the order of their first file."""
    groups: dict[tuple[str, str], list[FleetFile]] = {}
    for f in files:
        groups.setdefault(copy_key(f), []).append(f)
    return [tuple(sorted(group, key=lambda f: (f.node_id, f.relative_path))) for group in groups.values()]


def group_batches(group: Sequence[FleetFile], columns: Sequence[str] = RECORD_FIELDS, distinct: bool = False,
                  native: bool | None = None) -> Iterator[pa.RecordBatch]:
    """The batches of every file of `group` (a `copy_groups` group). With `distinct`, a
    file byte-identical to an earlier one of the group gives only its error rows (see
    the module docstring for why the answers cannot change)."""
    use_native = _uses_native(columns, native)
    decoded: list[tuple[bytes, list[tuple]]] = []  # (bytes, error rows) of the files read so far
    for f in group:
        data = None
        if distinct and decoded:
            data = _peek_bytes(f)
            twin = next((errors for seen, errors in decoded if data is not None and seen == data), None)
            if twin is not None:
                if twin:
                    prefix = reader._context(f).prefix
                    yield rows_to_batch([prefix + row[len(prefix):] for row in twin], columns)
                continue
        data, batches, errors = _file_parts(f, columns, use_native, data)
        if distinct and data is not None:
            decoded.append((data, errors))
        yield from batches


def group_rows(group: Sequence[FleetFile], distinct: bool = False) -> Iterator[tuple]:
    """`group_batches` as the Python reader's row tuples (all of RECORD_FIELDS)."""
    decoded: list[tuple[bytes, list[tuple]]] = []
    error_index = _INDEX["error"]
    for f in group:
        data = None
        if distinct and decoded:
            data = _peek_bytes(f)
            twin = next((errors for seen, errors in decoded if data is not None and seen == data), None)
            if twin is not None:
                prefix = reader._context(f).prefix
                yield from (prefix + row[len(prefix):] for row in twin)
                continue
        ctx, data, state, failure = reader.open_file(f, data)
        if failure is not None:
            yield failure
            continue
        errors: list[tuple] = []
        # Bounded: every step moves state.position forward or ends.
        while not state.done and state.position < len(data):
            for row in reader.step(ctx, data, state):
                if row[error_index] is not None:
                    errors.append(row)
                yield row
        if distinct:
            decoded.append((data, errors))


def _peek_bytes(f: FleetFile) -> bytes | None:
    try:
        return reader._read_bytes(f.path)
    except OSError:
        return None  # read again by _file_parts, which reports it


def rebatch(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """`batches` regrouped into batches of about `rows` rows (small ones joined, large
    ones cut), so Spark gets few, even batches."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            joined = pa.concat_batches(pending) if len(pending) > 1 else pending[0]
            start = 0
            while joined.num_rows - start >= rows:
                yield joined.slice(start, rows)
                start += rows
            pending = [joined.slice(start)] if start < joined.num_rows else []
            count = joined.num_rows - start
    if count:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]
