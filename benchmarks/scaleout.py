"""Scale-out: WordCount on 1 process vs 2, and records/s across processes vs a bare socket.

(a) WordCount (examples/wordcount.py ``--exchange --all-workers``): 1M lines of 10 words
over a 10k-word vocabulary (``--quick``: 200k), 4 epochs, words routed by value and
counted per epoch; every process reads its share. Run as 1 process x 1 worker and as 2
processes x 1 worker on loopback. The time is dataflow time only: each process times
from a barrier (an empty first epoch every worker has closed) to the probe passing the
last epoch, and the slower process counts; input generation and connecting are
excluded. ``summary.wordcount_speedup_2_over_1`` is 1-process time / 2-process time.

(b) Records crossing processes: worker 0 of a 2-process cluster sends N short strings
(2M; ``--quick``: 300k) in batches of 1024 through an ``Exchange`` that routes all of
them to worker 1, which counts them; the time runs from the barrier until worker 0's
probe shows all were consumed. The limit: a bare pair of processes that sends the same
records as msgpack arrays of 1024 over a loopback TCP socket and decodes them.
``summary.transfer_over_bare`` is the dataflow's records/s over the bare loop's.

Each figure is the best of ``--repeat`` runs (3; ``--quick``: 1): the machine is
shared, and the best run is the one least disturbed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from _common import ROOT, parse_args, table, write_report

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_scaleout_job.py")


def _number(pattern: str, lines: list[str]) -> list[float]:
    return [float(m.group(1)) for line in lines for m in [re.search(pattern, line)] if m]


def wordcount_once(processes: int, lines: int) -> float:
    """Dataflow seconds of the slowest process; checks every word was counted once."""
    if processes == 1:
        out = subprocess.run([sys.executable, JOB, "wordcount", "--lines", str(lines)],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"wordcount on 1 process failed:\n{out.stderr[-2000:]}")
        printed = out.stdout.splitlines()
    else:
        with LocalCluster([JOB, "wordcount", "--lines", str(lines)], slots=processes) as cluster:
            cluster.start(processes)
            codes = cluster.wait(600)
            printed = [line for p in cluster.processes for _, line in p.lines]
            if codes != [0] * processes:
                raise SystemExit("wordcount cluster failed:\n" + "\n".join(cluster.interleaved()[-40:]))
    counted = sum(int(x) for x in _number(r"s, (\d+) words", printed))
    if counted != lines * 10:
        raise SystemExit(f"wordcount on {processes} processes counted {counted} words, not {lines * 10}")
    return max(_number(r"^dataflow ([\d.]+) s", printed))


def transfer_once(records: int) -> float:
    with LocalCluster([JOB, "transfer", "--records", str(records)], slots=2) as cluster:
        cluster.start(2)
        codes = cluster.wait(600)
        printed = [line for p in cluster.processes for _, line in p.lines]
        if codes != [0, 0]:
            raise SystemExit("transfer cluster failed:\n" + "\n".join(cluster.interleaved()[-40:]))
    if _number(r"^received (\d+)", printed) != [records]:
        raise SystemExit(f"transfer: worker 1 did not receive {records} records: {printed}")
    return _number(r"^transfer ([\d.]+) s", printed)[0]


def bare_once(records: int) -> float:
    recv = subprocess.Popen([sys.executable, JOB, "bare", "recv"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = int(recv.stdout.readline().split()[1])
        out = subprocess.run([sys.executable, JOB, "bare", "send", str(port), str(records)],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"bare sender failed:\n{out.stderr[-2000:]}")
        received = recv.stdout.read()
        if recv.wait(60) != 0 or f"received {records}" not in received:
            raise SystemExit(f"bare receiver failed: {received!r}")
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    return _number(r"^bare ([\d.]+) s", out.stdout.splitlines())[0]


def main() -> None:
    args = parse_args("scaleout", __doc__.splitlines()[0],
                      lambda p: p.add_argument("--repeat", type=int, default=None,
                                               help="runs per figure (the best counts)"))
    lines = 200_000 if args.quick else 1_000_000
    records = 300_000 if args.quick else 2_000_000
    repeat = args.repeat or (1 if args.quick else 3)
    results = []
    wc = {}
    for processes in (1, 2):
        runs = [wordcount_once(processes, lines) for _ in range(repeat)]
        wc[processes] = min(runs)
        results.append({"experiment": "wordcount", "processes": processes, "workers_per_process": 1,
                        "lines": lines, "words": lines * 10, "seconds": wc[processes], "runs": runs,
                        "words_per_s": lines * 10 / wc[processes]})
    moved = {}
    for name, once in (("dataflow", transfer_once), ("bare", bare_once)):
        runs = [once(records) for _ in range(repeat)]
        moved[name] = min(runs)
        results.append({"experiment": "transfer", "system": name, "records": records, "seconds": moved[name],
                        "runs": runs, "records_per_s": records / moved[name]})
    rows = [[f"wordcount {r['processes']} process(es)", f"{r['seconds']:.3f}", f"{r['words_per_s']:,.0f} words/s"]
            for r in results if r["experiment"] == "wordcount"]
    rows += [[f"transfer {r['system']}", f"{r['seconds']:.3f}", f"{r['records_per_s']:,.0f} records/s"]
             for r in results if r["experiment"] == "transfer"]
    print(table(rows, ["run", "seconds", "rate"]))
    summary = {
        "wordcount_1_process_s": wc[1],
        "wordcount_2_processes_s": wc[2],
        "wordcount_speedup_2_over_1": wc[1] / wc[2],
        "transfer_records_per_s": records / moved["dataflow"],
        "bare_records_per_s": records / moved["bare"],
        "transfer_over_bare": moved["bare"] / moved["dataflow"],
    }
    print(f"speedup 2 over 1: {summary['wordcount_speedup_2_over_1']:.2f}x; "
          f"cross-process records/s: {summary['transfer_over_bare']:.2f}x the bare socket loop")
    write_report(args.json, "scaleout", summary, results, lines=lines, records=records, repeat=repeat)


if __name__ == "__main__":
    main()
