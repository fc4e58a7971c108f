"""One Kafka progress hop: append -> delivered, against the fetch wait and the rate.

Kafka progress mode's epoch latency is a number of sequential hops through the broker:
a worker appends a progress batch to its log (``broker.ProgressLog``: produce, acks=all)
and the other processes' ``broker.Subscriber`` fetches it. This measures one hop alone,
with the runtime's own classes and client settings (``tansu_fetch.run``: 500-record
segments, a fresh Tansu on a loopback port per run, writer and reader in one process so
one clock times both ends), for fetch waits of 1, 2, 5 (the default) and 10 ms at 50
and 200 records/s, 10 s each (``--quick``: 4 s). Reported per run: the hop's
p50/p99 and the broker's CPU (share of one core, mean over the windows).

Why it matters: with WordCount's per-epoch notification (seed 003), an epoch completes
after two sequential progress hops (the inputs' advance reaches the counting operators;
their release reaches the probes), so Kafka mode's epoch p50 is at least the p2p one
plus about two hop p50s. ``summary`` gives, per fetch wait at 50/s, that floor over
the p2p epoch p50 passed as ``--p2p-p50-ms`` (1.6, the steady p2p p50 at 50 epochs/s
in the committed progress_modes.json), to compare with issue 12's goal of 3x.
"""
from __future__ import annotations

from _common import parse_args, table, write_report
from tansu_fetch import WINDOW, run
from tqdm import tqdm

WAITS_MS = (1, 2, 5, 10)
RATES = (50.0, 200.0)


def main() -> None:
    def extra(p):
        p.add_argument("--p2p-p50-ms", type=float, default=1.6,
                       help="p2p epoch p50 to compare the two-hop floor with (ms)")
    args = parse_args("kafka_hop", __doc__.splitlines()[0], extra)
    seconds = 4.0 if args.quick else 10.0
    results, rows, summary = [], [], {"p2p_epoch_p50_ms": args.p2p_p50_ms}
    with tqdm(total=len(WAITS_MS) * len(RATES) * int(seconds / WINDOW), unit="window") as bar:
        for rate in RATES:
            for wait in WAITS_MS:
                bar.set_description(f"{rate:.0f}/s, wait {wait} ms")
                r = run(500, rate, seconds, bar, options={"fetch.wait.max.ms": wait})
                cpu = sum(w["broker_cpu"] for w in r["windows"]) / len(r["windows"])
                hop = r["overall"]
                results.append({"rate": rate, "fetch_wait_ms": wait, "hop_ms": hop, "broker_cpu": cpu,
                                "appended": r["appended"], "delivered": r["delivered"], "errors": r["errors"]})
                rows.append([f"{rate:.0f}", wait, f"{hop['p50']:.2f}", f"{hop['p99']:.2f}", f"{100 * cpu:.0f}%",
                             f"{r['delivered']}/{r['appended']}"])
                key = f"{rate:.0f}/s wait {wait} ms"
                summary[key] = {"hop_p50_ms": hop["p50"], "hop_p99_ms": hop["p99"], "broker_cpu": cpu}
                if rate == 50.0:
                    floor = args.p2p_p50_ms + 2 * hop["p50"]
                    summary[key].update(two_hop_floor_ms=floor, floor_over_p2p=floor / args.p2p_p50_ms)
    print(table(rows, ["records/s", "fetch wait ms", "hop p50 ms", "hop p99 ms", "broker CPU", "delivered"]))
    write_report(args.json, "kafka_hop", summary, results, seconds=seconds)


if __name__ == "__main__":
    main()
