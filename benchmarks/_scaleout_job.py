"""Jobs that ``benchmarks/scaleout.py`` launches: ``python benchmarks/_scaleout_job.py JOB ...``.

``wordcount``: examples/wordcount.py's ``--exchange --all-workers`` job. Every process
generates the same synthetic lines, each worker takes its share (``lines[i::peers]``);
words are routed by value (``Exchange(None)``) and counted per epoch. Before the clock
starts, every worker closes an empty epoch 0 and waits until the probe passes it (a
barrier: every process is connected and has built its dataflow), so the time printed
is dataflow time only: ``dataflow SECONDS s, cpu SECONDS s, COUNTED words, DISTINCT
keys``, the second figure being the process's CPU time (all its threads) over the same span.

``transfer`` (2 processes x 1 worker): worker 0 sends ``--records`` short strings in
batches of 1024 through ``Exchange(None)``; the strings are chosen so that every one
routes to worker 1, which counts them; after the same barrier, worker 0 prints ``transfer SECONDS
s, N records`` once its probe shows worker 1 consumed them all, and worker 1 prints
``received N``.

``bare``: the limit for ``transfer``, with no dataflow: ``bare recv`` listens on a
free 127.0.0.1 port (printed as ``port P``), ``bare send PORT N`` sends the same records
as msgpack arrays of 1024 with a 4-byte length prefix; the receiver decodes every batch,
counts the records and answers one byte after the last; the sender prints ``bare
SECONDS s, N records`` (connection excluded).
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

BATCH = 1024


def words(n: int) -> list[str]:
    """``n`` short strings over a vocabulary of 10,000 that ``Exchange`` routes to worker 1
    of 2 (so the records cross from process 0 to process 1 of a 2 x 1 cluster)."""
    from itertools import count, islice
    from timely.megaphone.bins import stable_hash64
    vocabulary = list(islice((w for w in (f"w{i}" for i in count()) if stable_hash64(w) % 2 == 1), 10_000))
    return [vocabulary[i % 10_000] for i in range(n)]


def barrier(worker, source, probe) -> None:
    """Close epoch 0 (empty) and wait until every worker has: all are up and built."""
    source.advance_to(1)
    worker.step_while(lambda: probe.less_than(1))


def wordcount(argv: list[str]) -> None:
    import argparse
    import timely
    from wordcount import count_words, synthetic_lines

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=4)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    lines = synthetic_lines(args.lines, 10, 10_000)

    def run(worker):
        def build(scope):
            source, stream = scope.new_input()
            counted = count_words(stream.flat_map(str.split))
            return source, counted.capture(), counted.probe()

        source, captured, probe = worker.dataflow(build)
        mine = lines[worker.index::worker.peers]
        barrier(worker, source, probe)
        start = time.perf_counter()
        cpu = time.process_time()
        per_epoch = -(-len(mine) // args.epochs)
        for epoch in range(1, args.epochs + 1):
            chunk = mine[(epoch - 1) * per_epoch:epoch * per_epoch]
            for i in range(0, len(chunk), BATCH):
                source.send_batch(chunk[i:i + BATCH])
                worker.step()
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(source.time()))
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        source.close()
        counts = [n for _, pairs in captured.batches for _, n in pairs]
        return elapsed, cpu, sum(counts), len(counts)

    for elapsed, cpu, total, distinct in timely.execute(config, run):
        print(f"dataflow {elapsed:.4f} s, cpu {cpu:.4f} s, {total} words, {distinct} keys", flush=True)


def transfer(argv: list[str]) -> None:
    import argparse
    import timely
    from timely import Exchange

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--records", type=int, default=2_000_000)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    records = words(args.records)
    if config.processes * config.workers != 2:
        raise SystemExit("transfer runs on 2 processes x 1 worker")

    def run(worker):
        received = [0]

        def build(scope):
            source, stream = scope.new_input()

            def constructor(cap, info):
                cap.drop()

                def logic(input, output):
                    for _, batch in input:
                        received[0] += len(batch)
                return logic
            sink = stream.unary(Exchange(None), "Sink", constructor)
            return source, sink.probe()

        source, probe = worker.dataflow(build)
        barrier(worker, source, probe)
        start = time.perf_counter()
        if worker.index == 0:
            for i in range(0, len(records), BATCH):
                source.send_batch(records[i:i + BATCH])
                worker.step()
        source.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        elapsed = time.perf_counter() - start
        source.close()
        return worker.index, elapsed, received[0]

    for index, elapsed, received in timely.execute(config, run):
        if index == 0:
            print(f"transfer {elapsed:.4f} s, {len(records)} records", flush=True)
        if index == 1:
            print(f"received {received}", flush=True)


def bare(argv: list[str]) -> None:
    import msgpack
    if argv[0] == "recv":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        print(f"port {listener.getsockname()[1]}", flush=True)
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b""
        while len(head) < 32:
            more = sock.recv(32 - len(head))
            if not more:
                raise SystemExit("sender went away")
            head += more
        expected = int(head.decode())
        buffer = bytearray()
        got = 0
        while got < expected:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise SystemExit("sender went away")
            buffer += chunk
            offset = 0
            while len(buffer) - offset >= 4:
                (length,) = struct.unpack_from("!I", buffer, offset)
                if len(buffer) - offset - 4 < length:
                    break
                batch = msgpack.unpackb(bytes(buffer[offset + 4:offset + 4 + length]), use_list=False, raw=False)
                got += len(batch)
                offset += 4 + length
            del buffer[:offset]
        sock.sendall(b"!")
        print(f"received {got}", flush=True)
        return
    port, n = int(argv[1]), int(argv[2])
    records = words(n)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(str(n).encode().ljust(32))
    start = time.perf_counter()
    for i in range(0, n, BATCH):
        payload = msgpack.packb(records[i:i + BATCH], use_bin_type=True)
        sock.sendall(struct.pack("!I", len(payload)) + payload)
    if sock.recv(1) != b"!":
        raise SystemExit("receiver did not confirm")
    print(f"bare {time.perf_counter() - start:.4f} s, {n} records", flush=True)


if __name__ == "__main__":
    {"wordcount": wordcount, "transfer": transfer, "bare": bare}[sys.argv[1]](sys.argv[2:])
