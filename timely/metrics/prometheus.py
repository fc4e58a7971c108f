"""The ``timely_*`` Prometheus metrics of one process, read from its status at each scrape.

Nothing is updated on the processing path: the workers keep plain counters
(``timely.metrics.instruments``), and ``Collector.collect`` turns a fresh
``process_status`` into metric families when ``/metrics`` is asked for. Labels:
``worker``, ``dataflow``, ``operator`` (the operator's id, its path, with ``name``), ``port``;
``topic`` and ``partition`` for Kafka.

Costs: a scrape is one ``process_status`` (O(operators x workers + bins + partitions)).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from .epochs import BUCKETS

#: every metric: name -> (kind, help); the README lists them from here
METRICS = {
    "timely_operator_records_in": ("counter", "records an operator pulled from its inputs"),
    "timely_operator_records_out": ("counter", "records an operator gave to its outputs"),
    "timely_operator_batches_in": ("counter", "batches an operator pulled from its inputs"),
    "timely_operator_batches_out": ("counter", "batches an operator gave to its outputs"),
    "timely_operator_scheduled_seconds": ("counter", "seconds an operator's logic ran"),
    "timely_operator_schedules": ("counter", "times an operator was scheduled"),
    "timely_operator_input_frontier": ("gauge", "the least time an operator input may still see "
                                                "(+Inf once it is closed)"),
    "timely_dataflow_frontier": ("gauge", "the least epoch a dataflow has not completed on a worker "
                                          "(+Inf once done)"),
    "timely_epochs_completed": ("counter", "epochs a dataflow completed on a worker"),
    "timely_epoch_latency_seconds": ("histogram", "from an epoch's input read to every operator done with it"),
    "timely_stateful_bins": ("gauge", "Megaphone bins a stateful operator holds on a worker"),
    "timely_stateful_keys": ("gauge", "keys a stateful operator holds on a worker"),
    "timely_migrations_in_flight": ("gauge", "routing-table changes announced and not yet in force"),
    "timely_bins_moved": ("counter", "bins a worker took in from others"),
    "timely_kafka_source_lag": ("gauge", "a source partition's end offset minus its position"),
    "timely_kafka_source_position": ("gauge", "the offset a source partition reads next"),
    "timely_kafka_sink_errors": ("counter", "records a kafka_sink could not deliver"),
    "timely_kafka_broker_up": ("gauge", "1 while the Kafka broker at an address answers, 0 while it is "
                                        "lost (broker.health)"),
    "timely_kafka_broker_errors": ("counter", "connection errors the Kafka clients of an address met "
                                              "(librdkafka's lines and errors, counted, not printed)"),
    "timely_kafka_source_withdrawn": ("counter", "events a kafka_source(early=True) handed on before their "
                                                 "marker, then withdrew (orphans, partitions given away)"),
    "timely_kafka_source_buffered_bytes": ("gauge", "bytes of record values a worker's Kafka sources read "
                                                    "and the dataflow has not finished (--source-read-ahead)"),
    "timely_exchange_in_flight_bytes": ("gauge", "bytes a worker sent to workers of other processes that "
                                                 "they have not acknowledged as consumed (--exchange-credit)"),
    "timely_progress_batches_sent": ("counter", "progress batches sent (label mode: p2p or kafka)"),
    "timely_progress_batches_received": ("counter", "progress batches received"),
    "timely_progress_log_written": ("gauge", "Kafka progress mode: records a local worker wrote to its log"),
    "timely_progress_log_read": ("gauge", "Kafka progress mode: records of another process's worker's log this process read"),
    "timely_checkpoint_label": ("gauge", "the label of the latest durable checkpoint commit"),
    "timely_rollbacks": ("counter", "rollbacks to a checkpoint after a crash"),
    "timely_recovery_seconds": ("gauge", "the last rollback's seconds from drop to running again"),
}

_INF = float("inf")


def _family(name: str, labels: list[str]) -> Any:
    kind, help_ = METRICS[name]
    cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}[kind]
    return cls(name, help_, labels=labels)


class Collector:
    """A prometheus_client collector over ``status()`` (``process_status``)."""

    def __init__(self, status: Callable[[], dict]) -> None:
        self._status = status

    def describe(self) -> list:
        return []               # no fixed set: families follow the dataflows

    def collect(self) -> Iterator[Any]:
        s = self._status()
        op_labels = ["worker", "dataflow", "operator", "name"]
        per_op = {m: _family(m, op_labels) for m in (
            "timely_operator_records_in", "timely_operator_records_out", "timely_operator_batches_in",
            "timely_operator_batches_out", "timely_operator_scheduled_seconds", "timely_operator_schedules")}
        frontier = _family("timely_operator_input_frontier", op_labels + ["port"])
        df_frontier = _family("timely_dataflow_frontier", ["worker", "dataflow"])
        epochs = _family("timely_epochs_completed", ["worker", "dataflow"])
        latency = HistogramMetricFamily("timely_epoch_latency_seconds",
                                        METRICS["timely_epoch_latency_seconds"][1], labels=["worker", "dataflow"])
        for df in s["dataflows"]:
            names = {o["id"]: o["name"] for o in df["operators"]}
            dname = df["name"]
            for w, figures in df["workers"].items():
                for op, n in figures["operators"].items():
                    labels = [w, dname, op, names.get(op, "")]
                    for metric, key in (("timely_operator_records_in", "records_in"),
                                        ("timely_operator_records_out", "records_out"),
                                        ("timely_operator_batches_in", "batches_in"),
                                        ("timely_operator_batches_out", "batches_out"),
                                        ("timely_operator_scheduled_seconds", "scheduled_seconds"),
                                        ("timely_operator_schedules", "schedules")):
                        per_op[metric].add_metric(labels, n[key])
                    for port, t in enumerate(n["frontier"]):
                        if t is None or isinstance(t, (int, float)):
                            frontier.add_metric(labels + [str(port)], _INF if t is None else t)
                f = figures["frontier"]
                df_frontier.add_metric([w, dname], _INF if f is None else f)
                epochs.add_metric([w, dname], figures["epochs_completed"])
                cumulative, total = [], 0
                for bound, count in zip(BUCKETS, figures["latency_buckets"]):
                    total += count
                    cumulative.append(("+Inf" if bound == _INF else repr(bound), total))
                latency.add_metric([w, dname], cumulative, figures["latency_sum"])
        yield from per_op.values()
        yield from (frontier, df_frontier, epochs, latency)
        bins = _family("timely_stateful_bins", ["worker", "dataflow", "operator"])
        keys = _family("timely_stateful_keys", ["worker", "dataflow", "operator"])
        moved = _family("timely_bins_moved", ["worker", "dataflow", "operator"])
        pending = _family("timely_migrations_in_flight", ["worker", "dataflow", "operator"])
        for st in s["stateful"]:
            labels = [str(st["worker"]), str(st["dataflow"]), st["operator"]]
            bins.add_metric(labels, st["bins"])
            keys.add_metric(labels, st["keys"])
            moved.add_metric(labels, st["bins_received"])
            pending.add_metric(labels, st["migrations_pending"])
        yield from (bins, keys, moved, pending)
        lag = _family("timely_kafka_source_lag", ["worker", "topic", "partition"])
        position = _family("timely_kafka_source_position", ["worker", "topic", "partition"])
        for part in s["kafka"]["lag"]:
            labels = [str(part["worker"]), part["topic"], str(part["partition"])]
            lag.add_metric(labels, part["lag"])
            position.add_metric(labels, part["position"])
        sink = _family("timely_kafka_sink_errors", [])
        sink.add_metric([], s["kafka"]["sink_errors"])
        withdrawn = _family("timely_kafka_source_withdrawn", [])
        withdrawn.add_metric([], s["kafka"]["withdrawn"])
        buffered = _family("timely_kafka_source_buffered_bytes", ["worker"])
        for b in s["kafka"].get("buffered", ()):
            buffered.add_metric([str(b["worker"])], b["bytes"])
        in_flight = _family("timely_exchange_in_flight_bytes", ["worker"])
        for f in s.get("exchange", {}).get("in_flight", ()):
            in_flight.add_metric([str(f["worker"])], f["bytes"])
        yield from (lag, position, sink, withdrawn, buffered, in_flight)
        up = _family("timely_kafka_broker_up", ["address"])
        errors = _family("timely_kafka_broker_errors", ["address"])
        for b in s["kafka"]["brokers"]:
            up.add_metric([b["address"]], 1 if b["up"] else 0)
            errors.add_metric([b["address"]], b["errors"])
        yield from (up, errors)
        mode = s["progress"]["mode"]
        for metric, key in (("timely_progress_batches_sent", "batches_sent"),
                            ("timely_progress_batches_received", "batches_received")):
            family = _family(metric, ["mode"])
            family.add_metric([mode], s["progress"][key])
            yield family
        for metric, key in (("timely_progress_log_written", "log_written"), ("timely_progress_log_read", "log_read")):
            if key in s["progress"]:
                family = _family(metric, ["worker"])
                for w, n in s["progress"][key].items():
                    family.add_metric([w], n)
                yield family
        rollbacks = _family("timely_rollbacks", [])
        rollbacks.add_metric([], s["rollbacks"])
        yield rollbacks
        if s["recovery_seconds"] is not None:
            recovery = _family("timely_recovery_seconds", [])
            recovery.add_metric([], s["recovery_seconds"])
            yield recovery
        ckpt = s["checkpoint"]
        if ckpt is not None and ckpt.get("last_label") is not None:
            label = _family("timely_checkpoint_label", [])
            label.add_metric([], ckpt["last_label"])
            yield label
