"""python -m broker status --bootstrap HOST:PORT [--prefix P] [--subscriber NAME ...]

Shows, per worker progress log under the prefix: its length in records, the latest
snapshot (the log sequence number and offset it covers), and each subscriber's
committed position. The length is found by reading the log from the latest snapshot
on (the test broker's end-offset answers cannot be trusted), so it costs the tail.
"""
from __future__ import annotations

import argparse
import sys
import time

from .log import BrokerError, Topics, client_options, connect_admin, unpack
from .subscriber import Subscriber


def status(bootstrap: str, prefix: str, subscribers: list[str], options: dict | None = None) -> list[dict]:
    from kafka import KafkaConsumer, TopicPartition
    topics = Topics(prefix)
    admin = connect_admin(bootstrap, options)
    try:
        names = sorted(t for t in admin.list_topics() if t.startswith(f"{prefix}.progress."))
        groups = [g["group_id"] if isinstance(g, dict) else g[0] for g in admin.list_groups()]
        subscribers = subscribers or sorted(g[len(f"{prefix}.sub."):] for g in groups
                                            if isinstance(g, str) and g.startswith(f"{prefix}.sub."))
        committed = {name: admin.list_group_offsets(topics.subscriber_group(name)).get(
            topics.subscriber_group(name), {}) for name in subscribers}
    finally:
        admin.close()
    probe = Subscriber(bootstrap, prefix, lambda *a: None, name="status", on_error=lambda e: None,
                       options=options)
    rows = []
    for topic in names:
        worker = int(topic.rsplit(".", 1)[1])
        snapshot = probe.latest_snapshot(worker)
        start = snapshot[2] if snapshot else 0
        reader = KafkaConsumer(**client_options(bootstrap, options), enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        reader.assign([tp])
        reader.seek(tp, start)
        last_lseq, idle = (snapshot[1] - 1 if snapshot else -1), time.monotonic()
        while time.monotonic() - idle < 0.5:
            batch = reader.poll(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    last_lseq = unpack(record.value)[0]
                idle = time.monotonic()
        reader.close()
        rows.append({"worker": worker, "log": topic, "records": last_lseq + 1,
                     "snapshot_lseq": snapshot[1] if snapshot else None,
                     "snapshot_offset": snapshot[2] if snapshot else None,
                     "subscribers": {name: (committed[name].get(tp).offset if committed[name].get(tp) else None)
                                     for name in subscribers}})
    probe.stop()
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="per worker log: length, latest snapshot, subscriber positions")
    st.add_argument("--bootstrap", required=True, help="HOST:PORT of a broker")
    st.add_argument("--prefix", default="timely")
    st.add_argument("--subscriber", action="append", default=[], help="subscriber name (default: all found)")
    args = parser.parse_args(argv)
    try:
        rows = status(args.bootstrap, args.prefix, args.subscriber)
    except BrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"no progress logs under prefix {args.prefix!r} at {args.bootstrap}")
        return 0
    for row in rows:
        snap = (f"snapshot covers {row['snapshot_lseq']} records (offset {row['snapshot_offset']})"
                if row["snapshot_lseq"] is not None else "no snapshot yet")
        subs = ", ".join(f"{k} at offset {v}" for k, v in row["subscribers"].items()) or "no subscribers"
        print(f"worker {row['worker']}: {row['records']} records; {snap}; {subs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
