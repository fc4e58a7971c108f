"""Writing ``timely-kafka``: Spark's batch and streaming writers, and the tasks that write
each epoch's rows of a Kafka partition.

Input columns: ``value`` (binary or string), optional ``key`` (binary or string),
optional ``partition`` (the Kafka partition; absent: the Spark partition id modulo the
topic's partition count), and for batch writes ``epoch`` (or the ``epoch`` option). Each
Kafka partition must be written by one Spark task: ``partition_for_kafka`` lays a
DataFrame out that way (whole Kafka partitions in each Spark partition, by default one
each; rows in epoch order). A batch task writes each epoch's rows of a partition, waits
for their delivery to learn their offsets, then appends the epoch's marker with that
range; the driver's commit appends (empty-epoch) markers to the partitions no task
wrote, and raises if two tasks wrote one partition (their rows are written by then; the
second task's rows fall outside the first marker and readers drop them). A streaming
task writes data rows only, with epoch = micro-batch id + ``epochOffset``; the driver's
commit, which runs after all of the micro-batch's tasks returned, appends one marker per
partition. An aborted write appends nothing, so its records stay orphans that no marker
covers. Costs: one produce call per record, two delivery callbacks per (partition,
epoch), one wait for delivery per (partition, epoch) in batch writes (a task sends every
partition's last records before its first wait, so the waits at its end overlap); a task
finds the stretches of rows with one partition and epoch with Arrow's kernels, so the
Python work per row is only what its record needs (packed JSON: one validating parse per
pack, which builds no objects, and the values go as written; a pack with a bad value, or
msgpack: a decode of each value, and the valid ones encoded again).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from timely.connectors import client, epochs

from .options import NAME, _WriteConf


# ---- writing (tasks) ----------------------------------------------------------------------
@dataclass
class _Written(WriterCommitMessage):
    """What one task wrote: ``{Kafka partition: [(epoch, first, end)]}``."""
    task: int
    runs: dict = field(default_factory=dict)


class _Run:
    """One epoch's records in one Kafka partition, being written by this task.

    The first record and the last one are produced with a delivery callback, which
    gives the offsets ``[first, end)``; the last record is held back until the run ends
    so that it is known to be the last."""

    __slots__ = ("partition", "epoch", "headers", "held", "packed", "records", "first", "end", "error")

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition, self.epoch = partition, epoch
        self.headers = epochs.data_headers(epoch)
        self.held: Optional[tuple] = None
        self.packed: list = []
        self.records = 0
        self.first: Optional[int] = None
        self.end: Optional[int] = None
        self.error: Any = None

    def on_first(self, error: Any, message: Any) -> None:
        if error is not None:
            self.error = error
        else:
            self.first = message.offset()

    def on_last(self, error: Any, message: Any) -> None:
        if error is not None:
            self.error = error
        else:
            self.end = message.offset() + 1


class _TaskWriter:
    """One Spark task's writes: runs per Kafka partition, in ascending epoch order."""

    def __init__(self, conf: _WriteConf, epoch: Optional[int], markers: bool) -> None:
        context = TaskContext.get()
        self.task = context.partitionId() if context is not None else 0
        self.conf = conf
        self.fixed_epoch = epoch
        self.markers = markers
        self.producer = conf.kafka.shared_producer()
        self.open: dict[int, _Run] = {}
        self.last: dict[int, int] = {}
        self.written: dict[int, list] = {}
        self.marker_errors: list = []
        self.packing = conf.rows_per_message > 1

    def write(self, batches: Iterator[pa.RecordBatch]) -> _Written:
        conf = self.conf
        default_partition = self.task % conf.partitions
        try:
            for batch in batches:
                values = batch.column("value").to_pylist()
                keys = batch.column("key").to_pylist() if conf.has_key else None
                parts = batch.column("partition") if conf.has_partition else None
                eps = batch.column("epoch") if conf.has_epoch else None
                open_runs = self.open
                for lo, hi in _runs([c for c in (parts, eps) if c is not None], len(values)):
                    p = default_partition if parts is None else parts[lo].as_py()
                    e = self.fixed_epoch if eps is None else eps[lo].as_py()
                    run = open_runs.get(p)
                    if run is None or run.epoch != e:
                        run = self._start(p, e)
                    if self.packing:
                        self._add_packed(run, values[lo:hi])
                    else:
                        for i in range(lo, hi):
                            self._emit(run, None if keys is None else keys[i], values[i], run.headers)
            self._end([self.open[p] for p in sorted(self.open)])
            self.open.clear()
        except BaseException:
            # Records never sent cannot become orphans that a retry of this task has to
            # step over: drop them.
            self.producer.purge()
            self.producer.flush(10.0)
            raise
        remaining = self.producer.flush(60.0)
        if remaining:
            raise client.ConnectorError(f"{remaining} records to {conf.topic!r} not delivered "
                                        f"within 60 s by Spark task {self.task}")
        if self.marker_errors:
            raise client.ConnectorError(f"writing markers to {conf.topic!r}: {self.marker_errors[0]}")
        return _Written(self.task, self.written)

    def _start(self, partition: int, epoch: Optional[int]) -> _Run:
        conf = self.conf
        if not isinstance(partition, int) or not 0 <= partition < conf.partitions:
            raise ValueError(f"{NAME}: column 'partition' holds {partition!r}, but topic {conf.topic!r} "
                             f"has partitions 0..{conf.partitions - 1}")
        if epoch is None:
            raise ValueError(f"{NAME}: a row for {conf.topic}[{partition}] has a null epoch")
        last = self.last.get(partition)
        if last is not None and epoch < last:
            raise ValueError(
                f"{NAME}: {conf.topic}[{partition}]: Spark task {self.task} got a row of epoch {epoch} "
                f"after rows of epoch {last}: the rows of each Kafka partition must come in ascending "
                f"epoch order (lay the DataFrame out with partition_for_kafka)")
        previous = self.open.get(partition)
        if previous is not None:
            self._end([previous])
        run = self.open[partition] = _Run(partition, epoch)
        self.last[partition] = epoch
        return run

    def _emit(self, run: _Run, key: Any, value: Any, headers: list) -> None:
        if run.records == 0:
            self._produce(run.partition, key, value, headers, run.on_first)
        else:
            if run.held is not None:
                self._produce(run.partition, *run.held, None)
            run.held = (key, value, headers)
        run.records += 1

    def _add_packed(self, run: _Run, values: list) -> None:
        """Add ``values`` to ``run``'s pack and write every full one (``rowsPerMessage``)."""
        packed = run.packed
        packed.extend(values)
        size = self.conf.rows_per_message
        full = len(packed) // size * size
        if full:
            for k in range(0, full, size):
                self._pack(run, packed[k:k + size])
            run.packed = packed[full:]

    def _pack(self, run: _Run, values: list) -> None:
        fmt = self.conf.format
        joined = fmt.join_many(values) if fmt.join_many is not None else None
        if joined is not None:          # every value valid: packed as written, not re-encoded
            self._emit(run, None, joined, epochs.data_headers(run.epoch, rows=len(values)))
            return
        if self.conf.rows_auto:
            # Packed by default, not by request: a value that is not valid in the format
            # (plain text, with the default json) goes alone, in its place, as it always did.
            parsed: list = []
            for v in values:
                try:
                    parsed.append(fmt.loads(v))
                except Exception:  # noqa: BLE001 - any decoder error: not this format
                    if parsed:
                        self._emit_packed(run, parsed)
                        parsed = []
                    self._emit(run, None, v, run.headers)
            if parsed:
                self._emit_packed(run, parsed)
            return
        try:
            events = [fmt.loads(v) for v in values]
        except Exception as exc:  # noqa: BLE001 - any decoder error names the format
            raise ValueError(f"{NAME}: rowsPerMessage packs values as a {fmt.name} array, but a "
                             f"value for {self.conf.topic}[{run.partition}] is not {fmt.name}: {exc}") from None
        self._emit_packed(run, events)

    def _emit_packed(self, run: _Run, values: list) -> None:
        self._emit(run, None, self.conf.format.dumps_many(values), epochs.data_headers(run.epoch, rows=len(values)))

    def _produce(self, partition: int, key: Any, value: Any, headers: list, callback: Any) -> None:
        while True:
            try:
                if callback is None:
                    self.producer.produce(self.conf.topic, value, key, partition, headers=headers)
                else:
                    self.producer.produce(self.conf.topic, value, key, partition, headers=headers,
                                          on_delivery=callback)
                return
            except BufferError:            # the local queue is full: let it drain
                self.producer.poll(0.05)

    def _end(self, runs: list[_Run]) -> None:
        """End ``runs``: every one's last records go out before the first wait for a
        delivery, so the waits overlap and the markers follow their records together."""
        for run in runs:
            self._flush_run(run)
        for run in runs:
            self._seal(run)

    def _flush_run(self, run: _Run) -> None:
        """Produce what ``run`` still holds: its last pack, and its last record, whose
        delivery gives the run's end."""
        if run.packed:
            self._pack(run, run.packed)
            run.packed = []
        if run.held is not None:
            self._produce(run.partition, *run.held, run.on_last)
            run.held = None

    def _seal(self, run: _Run) -> None:
        """End ``run``, flushed: wait until its offsets are known, then append its marker
        (batch writes) or note its range for the driver (streaming writes)."""
        conf = self.conf
        single = run.records == 1
        while run.error is None and (run.first is None or (run.end is None and not single)):
            self.producer.poll(0.05)
        if single and run.error is None:
            run.end = run.first + 1
        if run.error is not None:
            raise client.ConnectorError(f"writing epoch {run.epoch} to {conf.topic}[{run.partition}]: "
                                        f"{run.error.str() if hasattr(run.error, 'str') else run.error}")
        if run.end - run.first != run.records:
            raise client.ConnectorError(
                f"epoch {run.epoch} of {conf.topic}[{run.partition}]: Spark task {self.task} wrote "
                f"{run.records} records, but they span offsets {run.first}-{run.end}: a record was "
                f"lost or another writer wrote to this partition at the same time")
        if self.markers:
            self.producer.produce(conf.topic, b"", None, run.partition,
                                  headers=epochs.marker_headers(run.epoch, run.first, run.end),
                                  on_delivery=self._marker_delivered)
        self.written.setdefault(run.partition, []).append((run.epoch, run.first, run.end))

    def _marker_delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.marker_errors.append(f"{message.topic()}[{message.partition()}]: {error.str()}")


def _runs(columns: list, n: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the stretches of rows ``0..n-1`` over which every column of
    ``columns`` (Arrow arrays) keeps one value (a null starts a stretch of its own), found
    by Arrow's compute kernels rather than a Python loop per row.

    >>> _runs([pa.array([0, 0, 1, 1]), pa.array([5, 6, 6, 6])], 4)
    [(0, 1), (1, 2), (2, 4)]
    >>> _runs([], 3), _runs([pa.array([], pa.int64())], 0)
    ([(0, 3)], [])
    """
    if n == 0:
        return []
    starts = [0]
    if n > 1 and columns:
        changed = None
        for column in columns:
            differs = pc.fill_null(pc.not_equal(column[1:], column[:-1]), True)
            changed = differs if changed is None else pc.or_(changed, differs)
        starts += [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
    return list(zip(starts, starts[1:] + [n]))


# ---- writing (driver) ---------------------------------------------------------------------
def _owners(conf: _WriteConf, messages: Sequence[Optional[WriterCommitMessage]]) -> dict[int, _Written]:
    """``{Kafka partition: what its task wrote}``; raises if two tasks wrote one partition."""
    owners: dict[int, _Written] = {}
    for message in messages:
        if not isinstance(message, _Written):
            continue
        for partition in message.runs:
            other = owners.setdefault(partition, message)
            if other is not message:
                raise client.ConnectorError(
                    f"{conf.topic}[{partition}] was written by two Spark tasks ({other.task} and "
                    f"{message.task}): each Kafka partition must be written by one task. Lay the "
                    f"DataFrame out with partition_for_kafka(df, {conf.partitions}, key_col)")
    return owners


def _append_markers(conf: _WriteConf, markers: list[tuple[int, list]]) -> None:
    """Append ``[(partition, marker headers)]`` in order and wait for their delivery."""
    if not markers:
        return
    errors: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(f"{message.topic()}[{message.partition()}]: {error.str()}")

    producer = conf.kafka.shared_producer()
    for partition, headers in markers:
        producer.produce(conf.topic, b"", None, partition, headers=headers, on_delivery=delivered)
    remaining = producer.flush(60.0)
    if remaining or errors:
        raise client.ConnectorError(f"appending epoch-end markers to {conf.topic!r}: "
                                    f"{errors[0] if errors else f'{remaining} not delivered within 60 s'}")


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, conf: _WriteConf) -> None:
        self.conf = conf

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        return _TaskWriter(self.conf, self.conf.epoch, markers=True).write(iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        conf = self.conf
        owners = _owners(conf, messages)
        written = {e for m in owners.values() for runs in m.runs.values() for e, _, _ in runs}
        if conf.epoch is not None:
            written.add(conf.epoch)
        # The partitions no task wrote still need each epoch's marker to complete it.
        _append_markers(conf, [(p, epochs.marker_headers(e)) for e in sorted(written)
                               for p in range(conf.partitions) if p not in owners])

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        # Nothing to undo: a partition's records without their marker are never read.
        return None


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, conf: _WriteConf) -> None:
        self.conf = conf

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        batch_id = TaskContext.get().getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise client.ConnectorError(f"{NAME}: the Spark task has no micro-batch id "
                                        "(local property streaming.sql.batchId)")
        epoch = int(batch_id) + self.conf.epoch_offset
        return _TaskWriter(self.conf, epoch, markers=False).write(iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        conf = self.conf
        epoch = batchId + conf.epoch_offset
        owners = _owners(conf, messages)
        markers = []
        for p in range(conf.partitions):
            runs = owners[p].runs[p] if p in owners else []
            headers = (epochs.marker_headers(epoch, runs[0][1], runs[0][2]) if runs
                       else epochs.marker_headers(epoch))
            markers.append((p, headers))
        _append_markers(conf, markers)

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        # The micro-batch is run again with the same id; this attempt's records fall
        # outside the range of the marker that run appends.
        return None
