"""python -m broker serve | status: a broker to try pytimely on; what the progress logs hold.

``serve [--port P]`` runs a Kafka broker (Tansu, in memory) on 127.0.0.1 in the
foreground until Ctrl-C (``broker.serve``).

``status --bootstrap HOST:PORT [--prefix P] [--subscriber NAME ...] [--option K=V ...]``
shows, per worker progress log under the prefix: its length in records, its segments
kept, the latest snapshot (the log sequence number it covers, and the segment and
offset its tail starts at), and each subscriber's committed position (segment and
offset). The length is found by reading the log from the latest snapshot to its end
(librdkafka's end-of-partition event; the test broker's end-offset answers cannot be
trusted), so it costs the tail.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from .client import BrokerError, connect_admin, consumer_config, group_offsets, list_groups
from .log import Topics, unpack
from .serve import add_parser, serve
from .subscriber import Subscriber


def _last_lseq(bootstrap: str, topic: str, start: int, before: int, options: Optional[dict]) -> int:
    """The lseq of the last record of ``topic`` at or after offset ``start`` (``before``
    if there is none), reading to the end of the partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    reader = Consumer({**consumer_config(bootstrap, f"{topic}.status", options), "enable.partition.eof": True})
    try:
        reader.assign([TopicPartition(topic, 0, start)])
        last, deadline = before, time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in reader.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    last = unpack(message.value())[0]
                elif error.code() == KafkaError._PARTITION_EOF:
                    return last
        raise BrokerError(f"reading {topic} to its end took more than 30 s")
    finally:
        reader.close()


def status(bootstrap: str, prefix: str, subscribers: list[str], options: Optional[dict] = None) -> list[dict]:
    """One row per worker log under ``prefix``: worker, segments (those kept), records,
    snapshot_lseq, snapshot_at ((segment, offset) or None), subscribers ({name:
    (segment, offset) or None})."""
    topics = Topics(prefix)
    admin = connect_admin(bootstrap, options)
    segments: dict[int, list[int]] = {}
    for topic in admin.list_topics(timeout=10).topics:
        where = topics.parse_log(topic)
        if where is not None:
            segments.setdefault(where[0], []).append(where[1])
    group_prefix = f"{prefix}.sub."
    subscribers = subscribers or sorted(g[len(group_prefix):] for g in list_groups(admin)
                                        if g.startswith(group_prefix))
    committed = {name: group_offsets(admin, topics.subscriber_group(name)) for name in subscribers}
    probe = Subscriber(bootstrap, prefix, lambda *a: None, name="status", on_error=lambda e: None,
                       options=options)
    rows = []
    try:
        for worker in sorted(segments):
            kept = sorted(segments[worker])
            snapshot = probe.latest_snapshot(worker)
            first, offset = snapshot[2] if snapshot else (kept[0], 0)
            last = snapshot[1] - 1 if snapshot else -1
            for k in (k for k in kept if k >= first):
                last = _last_lseq(bootstrap, topics.log(worker, k), offset if k == first else 0, last, options)
            rows.append({"worker": worker, "segments": kept, "records": last + 1,
                         "snapshot_lseq": snapshot[1] if snapshot else None,
                         "snapshot_at": tuple(snapshot[2]) if snapshot else None,
                         "subscribers": {name: _position(topics, committed[name], worker)
                                         for name in subscribers}})
    finally:
        probe.stop()
    return rows


def _position(topics: Topics, offsets: dict, worker: int) -> Optional[tuple[int, int]]:
    """A subscriber's committed (segment, offset) in ``worker``'s log: its latest segment."""
    found = [(where[1], offset) for (topic, _), offset in offsets.items()
             if (where := topics.parse_log(topic)) is not None and where[0] == worker]
    return max(found) if found else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    st = sub.add_parser("status", help="per worker log: length, latest snapshot, subscriber positions")
    st.add_argument("--bootstrap", required=True, help="HOST:PORT of a broker")
    st.add_argument("--prefix", default="timely")
    st.add_argument("--subscriber", action="append", default=[], help="subscriber name (default: all found)")
    st.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka client property (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args.port)
    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option {item!r} is not KEY=VALUE")
        options[key] = int(value) if value.isdigit() else value
    try:
        rows = status(args.bootstrap, args.prefix, args.subscriber, options)
    except BrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"no progress logs under prefix {args.prefix!r} at {args.bootstrap}")
        return 0
    for row in rows:
        snap = ("snapshot covers {} records (segment {} offset {})".format(row["snapshot_lseq"], *row["snapshot_at"])
                if row["snapshot_lseq"] is not None else "no snapshot yet")
        subs = ", ".join(f"{k} at segment {v[0]} offset {v[1]}" if v else f"{k} nowhere yet"
                         for k, v in row["subscribers"].items()) or "no subscribers"
        kept = row["segments"]
        print(f"worker {row['worker']}: {row['records']} records in segments {kept[0]}-{kept[-1]}; {snap}; {subs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
