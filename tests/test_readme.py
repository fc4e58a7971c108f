"""The README's first section runs as written, and ``python -m broker serve`` behaves.

Protects what a newcomer relies on in the first minutes:
- the ``sh`` blocks of the README's first section, run in order with bash (only the
  ports swapped for free ones and ``python`` for this interpreter), in a directory that
  has the repository's ``examples/``: the broker comes up and prints its address, the
  demo clicks are written, the two page_totals processes end on their own, and the
  totals they print are exactly those of the clicks in Kafka (read back by their
  markers, not taken from the demo's generator), as are the demo's printed totals and
  the totals the job wrote to ``page-totals``; run again, the demo refuses to add to
  the topic and the job ends printing nothing (the README says so); Ctrl-C (SIGINT to
  the terminal's process group) stops the broker with status 0;
- the README's listing is examples/page_totals.py's code, word for word;
- ``python -m broker serve`` on a busy port fails at once, naming the port; SIGTERM
  stops it with status 0 and its Tansu child with it; a Tansu that dies on its own makes
  it exit 2, saying so.

Every process is started in a session of its own and stopped by its process group id
in a ``finally``; every wait is for a line or an exit, with a bound.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from broker.tansu import free_port  # noqa: E402
from timely.connectors.client import consumer_config, scan, topic_partitions  # noqa: E402
from timely.connectors.epochs import JSON, PartitionEpochs  # noqa: E402
from timely.launch import Process, free_ports  # noqa: E402

#: the ports the README's first section uses: its broker, then its hostfile's
README_PORTS = ("9092", "2101", "2102", "2103")
TOTALS = re.compile(r"^epoch (\d+): ([a-z]+ \d+(?:, [a-z]+ \d+)*)$")


# ---- the README, read ------------------------------------------------------------------------
def first_section(readme: str) -> str:
    """The text under the README's first ``## `` heading, up to the next."""
    headings = [m.start() for m in re.finditer(r"^## ", readme, re.M)]
    assert len(headings) >= 2, "the README has no first section"
    return readme[headings[0]:headings[1]]


def fenced(section: str, language: str) -> list[str]:
    """The bodies of the section's ```language blocks, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", section, re.M | re.S)


def localized(block: str, ports: dict[str, int]) -> str:
    """``block`` with the README's ports swapped for ``ports`` and ``python`` (the
    command) for this interpreter: nothing else changes."""
    block = re.sub(r"(?<![\w./-])python(?=\s)", shlex.quote(sys.executable), block)
    return re.sub(r"\b(" + "|".join(ports) + r")\b", lambda m: str(ports[m.group(1)]), block)


def parse_totals(lines: list[str]) -> list[tuple[int, dict[str, int]]]:
    """The ``epoch E: page N, page N`` lines, as (E, {page: N})."""
    found = []
    for line in lines:
        m = TOTALS.match(line)
        if m:
            found.append((int(m.group(1)), {p: int(n) for p, n in (i.split(" ") for i in m.group(2).split(", "))}))
    return found


# ---- Kafka, read back ------------------------------------------------------------------------
def read_epochs(brokers: str, topic: str) -> dict[int, list]:
    """Every epoch of ``topic`` complete in all its partitions, as ``{epoch: [event]}``,
    read by a reader that trusts markers."""
    from confluent_kafka import Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    try:
        count = topic_partitions(consumer, brokers, [topic])[topic]
        states = {p: PartitionEpochs(topic, p) for p in range(count)}
        found: dict[int, list] = {}
        for messages in scan(consumer, {(topic, p): 0 for p in range(count)}, timeout=30):
            for m in messages:
                for epoch, records in states[m.partition()].record(m.offset(), m.headers(), m.value()):
                    found.setdefault(epoch, []).extend(JSON.decode(
                        [r[1] for r in records], [r[2] for r in records], topic, m.partition(),
                        [r[0] for r in records]))
    finally:
        consumer.close()
    complete = min(s.completed if s.completed is not None else -1 for s in states.values())
    return {e: events for e, events in found.items() if e <= complete}


def running_totals(by_epoch: dict[int, list]) -> dict[int, dict[str, int]]:
    """Per epoch, every page's clicks up to and including it (counted here, from Kafka)."""
    totals: Counter = Counter()
    out = {}
    for epoch in sorted(by_epoch):
        totals.update(e["page"] for e in by_epoch[epoch])
        out[epoch] = dict(totals)
    return out


def highest_totals(printed: list[tuple[int, dict[str, int]]], want: dict[int, dict[str, int]],
                   output: str) -> dict[tuple[int, str], int]:
    """The highest total printed per (epoch, page), each printed total checked to be one
    the page had during that epoch (above its total before it, at most its total after)."""
    assert printed, output
    highest: dict[tuple[int, str], int] = {}
    for epoch, totals in printed:
        for page, n in totals.items():
            before = want[epoch - 1].get(page, 0) if epoch else 0
            assert before < n <= want[epoch][page], (epoch, page, n, output)
            highest[(epoch, page)] = max(n, highest.get((epoch, page), 0))
    return highest


# ---- processes -------------------------------------------------------------------------------
def finish(proc: Process, timeout: float) -> int:
    """``proc``'s exit status; fails with its output if it runs past ``timeout`` seconds."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{proc.label} did not finish within {timeout:g} s:\n{proc.output()}")


def stop(procs: list[Process]) -> None:
    """Stop every process group still running: SIGTERM, then SIGKILL after 15 s."""
    for proc in procs:
        proc.signal_group(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.signal_group(signal.SIGKILL)
            proc.wait(15)


def environment() -> dict:
    """This environment with the repository first on the path. Not PYTHONUNBUFFERED: it
    makes ``print`` write a line's text and its newline apart, so two processes' lines
    into one pipe could mix, where a terminal (line-buffered) gets whole lines."""
    env = {**os.environ}
    env.pop("PYTHONUNBUFFERED", None)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = ROOT + (os.pathsep + path if path else "")
    return env


# ---- the tests -------------------------------------------------------------------------------
def test_readme_listing_is_the_example():
    with open(os.path.join(ROOT, "README.md")) as f:
        listings = fenced(first_section(f.read()), "python")
    with open(os.path.join(ROOT, "examples", "page_totals.py")) as f:
        example = f.read()
    assert listings, "the README's first section has no python listing"
    assert listings[0] in example, "the README's listing is not examples/page_totals.py's code"


def test_readme_first_section_runs_as_written(tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        section = first_section(f.read())
    blocks, samples = fenced(section, "sh"), fenced(section, "text")
    assert samples and parse_totals(samples[0].splitlines()), "the README shows no output of the job"
    assert len(blocks) == 3, f"expected three terminals' commands, found {len(blocks)} sh blocks"
    assert "broker serve" in blocks[0] and "demo-clicks" in blocks[1] and "page_totals.py" in blocks[2], blocks
    ports = dict(zip(README_PORTS, free_ports(len(README_PORTS))))
    blocks = [localized(b, ports) for b in blocks]
    assert all(str(p) in "".join(blocks) for p in ports.values()), blocks
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    env, start = environment(), time.monotonic()
    brokers = f"127.0.0.1:{ports['9092']}"

    def terminal(i: int) -> Process:
        proc = Process(i, ["bash", "-c", blocks[i]], env, start, f"terminal {i + 1}", cwd=str(tmp_path),
                       session=True)
        procs.append(proc)
        return proc

    procs: list[Process] = []
    try:
        broker = terminal(0)
        if not broker.wait_for(rf"^broker: serving Kafka at {re.escape(brokers)} ", 30):
            pytest.fail(f"the broker never printed its address:\n{broker.output()}")
        demo = terminal(1)
        assert finish(demo, 60) == 0, demo.output()
        job = terminal(2)
        assert finish(job, 180) == 0, job.output()

        clicks = read_epochs(brokers, "clicks")
        assert sorted(clicks) == [0, 1, 2, 3, 4], sorted(clicks)
        assert all(len(events) == 20 for events in clicks.values()), {e: len(v) for e, v in clicks.items()}
        want = running_totals(clicks)

        # what the job printed: for each epoch, every page clicked in it, with its total
        # after the epoch as the highest, and no total that page did not have in it
        highest = highest_totals(parse_totals([line for _, line in job.lines]), want, job.output())
        clicked = {(e, ev["page"]) for e, events in clicks.items() for ev in events}
        assert highest == {(e, p): want[e][p] for e, p in clicked}, job.output()
        # and the README's sample of that output is some run's (it is the default seed's)
        highest_totals(parse_totals(samples[0].splitlines()), want, samples[0])

        # what the demo printed: the running totals after each epoch
        shown = {}
        for _, line in demo.lines:
            m = re.match(r"^epoch (\d+): .*; page totals so far: (.*)$", line)
            if m:
                shown[int(m.group(1))] = {p: int(n) for p, n in (i.split(" ") for i in m.group(2).split(", "))}
        assert shown == want, demo.output()

        # what the job wrote to Kafka: the same totals, every epoch complete
        written = read_epochs(brokers, "page-totals")
        assert sorted(written) == [0, 1, 2, 3, 4], sorted(written)
        in_kafka: dict[tuple[int, str], int] = {}
        for epoch, rows in written.items():
            for row in rows:
                in_kafka[(epoch, row["page"])] = max(row["clicks"], in_kafka.get((epoch, row["page"]), 0))
        assert in_kafka == highest

        # run again, as the README says: the demo refuses to add to the topic, and the job,
        # its consumer group done, ends with nothing to print
        again = terminal(1)
        assert finish(again, 60) == 2, again.output()
        assert "already holds epochs up to 4" in again.output(), again.output()
        rerun = terminal(2)
        assert finish(rerun, 180) == 0, rerun.output()
        assert parse_totals([line for _, line in rerun.lines]) == [], rerun.output()

        broker.signal_group(signal.SIGINT)              # Ctrl-C in its terminal
        assert finish(broker, 30) == 0, broker.output()
        assert broker.wait_for(r"^broker: stopped$", 1), broker.output()
    finally:
        stop(procs)


def _serve(port: int, label: str) -> Process:
    return Process(0, [sys.executable, "-m", "broker", "serve", "--port", str(port)], environment(),
                   time.monotonic(), label, cwd=ROOT, session=True)


def _tansu_child(proc: Process) -> int:
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    assert len(children) == 1, f"{proc.label} has children {children}, not one Tansu"
    return children[0]


def test_broker_serve_busy_port_then_sigterm():
    port = free_port()
    procs: list[Process] = []
    try:
        first = _serve(port, "first")
        procs.append(first)
        assert first.wait_for(rf"^broker: serving Kafka at 127\.0\.0\.1:{port} ", 30), first.output()
        tansu = _tansu_child(first)
        second = _serve(port, "second")
        procs.append(second)
        assert finish(second, 30) == 2, second.output()
        assert f"broker: port {port} on 127.0.0.1 is taken" in second.output(), second.output()
        assert first.popen.poll() is None, f"the first broker stopped:\n{first.output()}"

        os.kill(first.pid, signal.SIGTERM)
        assert finish(first, 30) == 0, first.output()
        assert first.output().endswith("broker: stopped"), first.output()
        assert not os.path.exists(f"/proc/{tansu}"), f"Tansu (pid {tansu}) outlived its broker"
    finally:
        stop(procs)


def test_broker_serve_says_when_tansu_dies():
    procs: list[Process] = []
    try:
        serve = _serve(free_port(), "serve")
        procs.append(serve)
        assert serve.wait_for(r"^broker: serving Kafka at ", 30), serve.output()
        os.kill(_tansu_child(serve), signal.SIGKILL)
        assert finish(serve, 30) == 2, serve.output()
        assert re.search(r"^broker: Tansu \(pid \d+\) exited by itself", serve.output(), re.M), serve.output()
    finally:
        stop(procs)
