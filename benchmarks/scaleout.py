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

(c) Where 2 processes lose: every process reports its CPU time over its dataflow span,
so ``summary.exchange_cpu_ns_per_word`` is what the exchange adds per word (CPU of all
processes / words, 2 processes minus 1). Against it, the floor of crossing, measured in
this process on WordCount's words with hot caches: the partition (every word) plus half
a pack and a decode (half the words cross), per codec twin. ``speedup_bound_from_floor``
is the speedup 2 processes would reach if crossing cost only that floor and nobody
ever waited: 2 x (1-process ns per word) / (1-process ns per word + floor).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from _common import ROOT, best_of, parse_args, table, write_report
from tqdm import tqdm

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_scaleout_job.py")


def _number(pattern: str, lines: list[str]) -> list[float]:
    return [float(m.group(1)) for line in lines for m in [re.search(pattern, line)] if m]


def wordcount_once(processes: int, lines: int) -> tuple[float, float]:
    """Dataflow seconds of the slowest process and the CPU seconds of all processes
    over their dataflow spans; checks every word was counted once."""
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
    return max(_number(r"^dataflow ([\d.]+) s", printed)), sum(_number(r"cpu ([\d.]+) s", printed))


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


def crossing_costs(words: int = 200_000) -> dict[str, float]:
    """Nanoseconds per word of what crossing adds, measured here on WordCount's words: 8
    batches of 1024 fresh from ``split``, as the exchange sees them, each timed over and
    over (hot caches: a floor, not the cost inside a run): the partition into 2 buckets
    (every word), and packing and decoding with each codec twin (crossing words only)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from wordcount import synthetic_lines
    from timely.communication import codec
    from timely.dataflow.exchange import partition
    batches = [[w for line in synthetic_lines(103, 10, 10_000, seed=s) for w in line.split()][:1024]
               for s in range(8)] * (words // 8192)
    words = len(batches) * 1024
    costs = {}
    twins = {"python": (codec.py_packb, codec.PyDecoder())}
    if codec.IMPLEMENTATION == "cython":
        from timely.communication import _ccodec
        twins["cython"] = (_ccodec.packb, _ccodec.Decoder())
    costs["partition_ns"] = best_of(lambda: [partition(b, None, 2) for b in batches], 5) / words * 1e9
    for name, (pack, decoder) in twins.items():
        packed = [pack((1, b)) for b in batches]
        costs[f"pack_{name}_ns"] = best_of(lambda: [pack((1, b)) for b in batches], 5) / words * 1e9
        costs[f"decode_{name}_ns"] = best_of(lambda: [decoder.decode(p) for p in packed], 5) / words * 1e9
    return costs


def main() -> None:
    args = parse_args("scaleout", __doc__.splitlines()[0],
                      lambda p: p.add_argument("--repeat", type=int, default=None,
                                               help="runs per figure (the best counts)"))
    lines = 200_000 if args.quick else 1_000_000
    records = 300_000 if args.quick else 2_000_000
    repeat = args.repeat or (1 if args.quick else 3)
    results = []
    wc = {}
    cpu = {}
    for processes in (1, 2):
        runs = [wordcount_once(processes, lines) for _ in tqdm(range(repeat), desc=f"wordcount x{processes}")]
        wc[processes], cpu[processes] = min(runs)
        results.append({"experiment": "wordcount", "processes": processes, "workers_per_process": 1,
                        "lines": lines, "words": lines * 10, "seconds": wc[processes],
                        "cpu_seconds_all_processes": cpu[processes], "runs": [r[0] for r in runs],
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
    costs = crossing_costs()
    words = lines * 10
    cpu_ns = {p: cpu[p] / words * 1e9 for p in (1, 2)}
    # Half the words cross: each pays the partition, and a crossing one a pack and a decode.
    twin = "cython" if "pack_cython_ns" in costs else "python"
    floor = costs["partition_ns"] + (costs[f"pack_{twin}_ns"] + costs[f"decode_{twin}_ns"]) / 2
    summary = {
        "wordcount_1_process_s": wc[1],
        "wordcount_2_processes_s": wc[2],
        "wordcount_speedup_2_over_1": wc[1] / wc[2],
        "cpu_ns_per_word_1_process": cpu_ns[1],
        "cpu_ns_per_word_2_processes": cpu_ns[2],
        "exchange_cpu_ns_per_word": cpu_ns[2] - cpu_ns[1],
        "crossing_floor_ns_per_word": floor,
        "speedup_bound_from_floor": 2 * cpu_ns[1] / (cpu_ns[1] + floor),
        **{f"crossing_{k}": v for k, v in costs.items()},
        "transfer_records_per_s": records / moved["dataflow"],
        "bare_records_per_s": records / moved["bare"],
        "transfer_over_bare": moved["bare"] / moved["dataflow"],
    }
    print(f"CPU per word: {cpu_ns[1]:.0f} ns on 1 process, {cpu_ns[2]:.0f} ns on 2; crossing floor "
          f"{floor:.0f} ns per word (bound {summary['speedup_bound_from_floor']:.2f}x); costs "
          + ", ".join(f"{k} {v:.1f}" for k, v in costs.items()))
    print(f"speedup 2 over 1: {summary['wordcount_speedup_2_over_1']:.2f}x; "
          f"cross-process records/s: {summary['transfer_over_bare']:.2f}x the bare socket loop")
    write_report(args.json, "scaleout", summary, results, lines=lines, records=records, repeat=repeat)


if __name__ == "__main__":
    main()
