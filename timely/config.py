"""Config: one object describing how to run, from CLI arguments, environment, or TOML.

Precedence, lowest first: defaults, the TOML file (``--config FILE`` or
``TIMELY_CONFIG``), environment variables (``TIMELY_WORKERS``, ``TIMELY_PROCESSES``,
``TIMELY_PROCESS``, ``TIMELY_HOSTFILE``, ``TIMELY_PROGRESS_MODE``,
``TIMELY_KAFKA_BOOTSTRAP``, ``TIMELY_KAFKA_PREFIX``, ``TIMELY_REBALANCE``,
``TIMELY_MIGRATION``, ``TIMELY_CHECKPOINT``, ``TIMELY_WORKER_MODE``, ``TIMELY_CHECKPOINT_INTERVAL``,
``TIMELY_CLUSTER_SECRET`` for the secret), then command-line arguments, which use timely's flags:
``-w WORKERS -n PROCESSES -p INDEX -h HOSTFILE``. Wrong values raise ``ConfigError``
naming the setting. A program parses its own flags first and hands the rest here (as
the examples do, with ``parse_known_args``); an option left that timely does not
declare either is a ``ConfigError`` naming it and the closest timely flag, as timely's
getopts stops on an unknown option, instead of a mistyped flag silently keeping a
default. Arguments that are not options stay in ``extra``.

>>> c = Config.from_args(["-w", "3", "program.py"])
>>> c.workers, c.processes, c.extra
(3, 1, ['program.py'])
>>> Config.from_args(["-w", "1", "--progres-mode", "kafka"])
Traceback (most recent call last):
...
timely.config.ConfigError: unknown option '--progres-mode': neither the program nor timely declares it (did you mean '--progress-mode'?)
>>> Config.from_args(["-w", "0"])
Traceback (most recent call last):
...
timely.config.ConfigError: workers must be at least 1, got 0
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import os
import tomllib
from typing import Any, Optional, Sequence


class ConfigError(ValueError):
    """A configuration value is missing, malformed, or inconsistent."""


@dataclasses.dataclass
class Config:
    workers: int = 1                      # workers per process
    # how -w workers run without -n: "auto" (processes where threads share a GIL),
    # "processes" (a forked loopback cluster) or "threads" (timely.communication.cluster.forked)
    worker_mode: str = "auto"
    processes: int = 1
    process: int = 0                      # this process's index
    hostfile: Optional[str] = None        # one host:port per line, process i on line i
    addresses: list[str] = dataclasses.field(default_factory=list)
    base_port: int = 2101
    progress_mode: str = "p2p"            # "p2p" | "kafka"
    kafka_bootstrap: Optional[str] = None
    kafka_prefix: str = "timely"          # topic names: several clusters can share a broker
    # a snapshot per worker log every N records (one per worker step): a joiner reads at
    # most this many records of each log after its snapshot, and the cluster waits for
    # it meanwhile (1000 cost a 3-process WordCount at 50 epochs/s a p99 of 410 ms at the
    # join, 200 one of 200 ms: benchmarks/progress_modes.py)
    kafka_snapshot_interval: int = 200
    kafka_segment_records: int = 500      # records per log segment topic (a fetch costs Tansu O(segment))
    # seconds between deletions of the segments all have read: a deletion stalls Tansu
    # for a moment, longer the more it deletes (1 s: max 65 ms at 500 epochs/s, 10 s: 123 ms)
    kafka_trim_interval: float = 1.0
    kafka_options: dict = dataclasses.field(default_factory=dict)  # librdkafka properties for broker/'s clients
    check_progress: bool = False          # assert progress accounting after every step
    # a directory: every process writes when each progress batch passed each stage
    # (timely.communication.progress_trace), for the progress-round breakdown
    progress_trace: Optional[str] = None
    timeout: float = 30.0                 # seconds a peer may stay silent before fail-stop
    # seconds to wait for the cluster's other processes at start-up; 0: for ever, saying
    # every `timeout` seconds whom it waits for (a supervisor's restart meets no crash loop)
    connect_timeout: float = 0.0
    # a dataflow whose frontier has not moved for this many seconds is logged with what
    # holds it, and shown on the status page (timely.stall); 0: never
    stall_warn: float = 30.0
    # seconds a Kafka broker may stay unreachable (sources, sinks, commits, checkpoints,
    # the progress log wait for it meanwhile) before the process stops (broker.health)
    broker_timeout: float = 300.0
    join: Optional[int] = None            # joining a running cluster: the bootstrap worker
    nn: Optional[int] = None              # joining: the number of processes once joined
    secret_file: Optional[str] = None     # the cluster secret (or TIMELY_CLUSTER_SECRET)
    secret: Optional[str] = None
    rescaling: bool = True                # acceptor + progress accumulation for joiners
    state_log_every: int = 0              # log progress-state sizes every N steps (0: never)
    rebalance: str = "auto"               # "auto": move bins to joined workers; "off": never
    migration: str = "batched"            # "all-at-once" | "fluid" | "batched"
    # where keyed state is checkpointed (timely.checkpoint): "auto" (Kafka, for a dataflow
    # with kafka_source and kafka_commit; else off), "kafka", "dir:PATH" or "off"
    checkpoint: str = "auto"
    checkpoint_interval: int = 1          # a checkpoint at every multiple of N epochs
    checkpoint_name: Optional[str] = None  # the store's namespace (default: source group + dataflow)
    # compact a store once this many keys were written since (and GROWTH times the keys
    # held); 0: timely.checkpoint.compaction.MIN_KEYS (50,000)
    checkpoint_compact_keys: int = 0
    # process p serves Prometheus metrics and the status page on port metrics_port + p
    # (timely.metrics); 0: off
    metrics_port: int = 0
    # while the workers run, a full collection of Python's cyclic GC is considered after
    # this many middle-generation ones (timely.collector; Python's own: 10); 0: unchanged
    gc_full_after: int = 1000
    # bytes of record values a Kafka source may have read past what its dataflow has
    # finished, per worker (timely.connectors.kafka.read_ahead); 0: no bound
    source_read_ahead: int = 8 << 20
    # bytes a worker may have in flight to a worker of another process on one channel,
    # unacknowledged, before its dataflow's sources hold back (timely.communication.credit);
    # 0: no credit
    exchange_credit: int = 16 << 20
    extra: list[str] = dataclasses.field(default_factory=list)  # arguments not ours

    def validate(self) -> "Config":
        if type(self.workers) is not int or self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers}")
        if type(self.processes) is not int or self.processes < 1:
            raise ConfigError(f"processes must be at least 1, got {self.processes}")
        if self.worker_mode not in ("auto", "processes", "threads"):
            raise ConfigError(f"worker_mode must be 'auto', 'processes' or 'threads', got {self.worker_mode!r}")
        if self.worker_mode == "processes" and self.cluster:
            raise ConfigError("worker_mode 'processes' runs -w workers as a cluster of one machine; "
                              "a process of a cluster (-n, -h, -j) runs its workers as threads: "
                              "start more processes with -n instead")
        if self.progress_mode not in ("p2p", "kafka"):
            raise ConfigError(f"progress_mode must be 'p2p' or 'kafka', got {self.progress_mode!r}")
        if self.progress_mode == "kafka":
            if not self.kafka_bootstrap:
                raise ConfigError("progress_mode 'kafka' needs kafka_bootstrap (HOST:PORT)")
            host, sep, port = self.kafka_bootstrap.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"kafka_bootstrap {self.kafka_bootstrap!r} is not HOST:PORT")
            if self.kafka_snapshot_interval < 1:
                raise ConfigError(f"kafka_snapshot_interval must be at least 1, got {self.kafka_snapshot_interval}")
            if self.kafka_segment_records < 1:
                raise ConfigError(f"kafka_segment_records must be at least 1, got {self.kafka_segment_records}")
            if not self.kafka_trim_interval > 0:
                raise ConfigError(f"kafka_trim_interval must be a positive number of seconds, "
                                  f"got {self.kafka_trim_interval}")
        if self.rebalance not in ("auto", "off"):
            raise ConfigError(f"rebalance must be 'auto' or 'off', got {self.rebalance!r}")
        if self.migration not in ("all-at-once", "fluid", "batched"):
            raise ConfigError(f"migration must be 'all-at-once', 'fluid' or 'batched', got {self.migration!r}")
        if not (self.checkpoint in ("auto", "kafka", "off") or
                (self.checkpoint.startswith("dir:") and len(self.checkpoint) > 4)):
            raise ConfigError(f"checkpoint must be 'auto', 'kafka', 'dir:PATH' or 'off', got {self.checkpoint!r}")
        if type(self.checkpoint_interval) is not int or self.checkpoint_interval < 1:
            raise ConfigError(f"checkpoint_interval must be a whole number of epochs >= 1, "
                              f"got {self.checkpoint_interval!r}")
        if type(self.checkpoint_compact_keys) is not int or self.checkpoint_compact_keys < 0:
            raise ConfigError(f"checkpoint_compact_keys must be a whole number of keys (0: the default), "
                              f"got {self.checkpoint_compact_keys!r}")
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")
        if self.connect_timeout < 0:
            raise ConfigError(f"connect_timeout must be 0 (wait for ever) or a positive number of "
                              f"seconds, got {self.connect_timeout}")
        if self.stall_warn < 0:
            raise ConfigError(f"stall_warn must be 0 (off) or a positive number of seconds, "
                              f"got {self.stall_warn}")
        if not self.broker_timeout > 0:
            raise ConfigError(f"broker_timeout must be a positive number of seconds, got {self.broker_timeout}")
        if type(self.metrics_port) is not int or not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be a TCP port (1-65535), or 0 for no metrics, "
                              f"got {self.metrics_port!r}")
        if type(self.gc_full_after) is not int or self.gc_full_after < 0:
            raise ConfigError(f"gc_full_after must be a whole number of collections (0: Python's own "
                              f"setting), got {self.gc_full_after!r}")
        if type(self.source_read_ahead) is not int or self.source_read_ahead < 0:
            raise ConfigError(f"source_read_ahead must be a number of bytes (such as 16M; 0: no bound), "
                              f"got {self.source_read_ahead!r}")
        if type(self.exchange_credit) is not int or not (self.exchange_credit == 0
                                                          or self.exchange_credit >= 256 << 10):
            raise ConfigError(f"exchange_credit must be a number of bytes of at least 256K (such as 16M; "
                              f"0: no credit), got {self.exchange_credit!r}")
        if self.join is not None:
            if self.nn is None:
                raise ConfigError("joining (--join B) needs --nn, the number of processes once joined")
            if not self.processes <= self.process < self.nn:
                raise ConfigError(f"a joining process's index (-p {self.process}) must be in "
                                  f"{self.processes}..{self.nn - 1} (-n original processes, --nn new count)")
            if not 0 <= self.join < self.process * self.workers:
                raise ConfigError(f"bootstrap worker {self.join} is not a worker of the running cluster")
            if not self.rescaling:
                raise ConfigError("cannot join with rescaling support switched off")
        elif not 0 <= self.process < self.processes:
            raise ConfigError(f"process index {self.process} is not in 0..{self.processes - 1}")
        return self

    @property
    def total_workers(self) -> int:
        return self.workers * self.processes

    @property
    def cluster(self) -> bool:
        """Cluster mode: more than one process, joining one, or a hostfile (a cluster of
        one process that others may join)."""
        return self.processes > 1 or self.join is not None or bool(self.hostfile)

    @classmethod
    def coerce(cls, value: Any) -> "Config":
        """A Config from a Config, a worker count, or a list of arguments."""
        if isinstance(value, Config):
            return value.validate()
        if value is None:
            return cls().validate()
        if isinstance(value, int):
            return cls(workers=value).validate()
        if isinstance(value, (list, tuple)):
            return cls.from_args(value)
        raise ConfigError(f"cannot make a Config from {value!r}")

    @classmethod
    def from_toml(cls, path: str) -> dict:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path!r} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path!r} is not valid TOML: {e}") from None
        section = data.get("timely", data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ConfigError(f"config file {path!r}: unknown settings {unknown}")
        return section

    @classmethod
    def from_args(cls, argv: Sequence[str] = (), env: Optional[dict] = None) -> "Config":
        env = os.environ if env is None else env
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)   # as getopts: whole names
        parser.add_argument("-w", "--workers", type=int)
        parser.add_argument("-n", "--processes", type=int)
        parser.add_argument("-p", "--process", type=int)
        parser.add_argument("-h", "--hostfile")
        parser.add_argument("--worker-mode", dest="worker_mode")
        parser.add_argument("--config")
        parser.add_argument("--progress-mode", dest="progress_mode")
        parser.add_argument("--kafka-bootstrap", dest="kafka_bootstrap")
        parser.add_argument("--kafka-prefix", dest="kafka_prefix")
        parser.add_argument("--kafka-snapshot-interval", dest="kafka_snapshot_interval", type=int)
        parser.add_argument("--kafka-segment-records", dest="kafka_segment_records", type=int)
        parser.add_argument("--kafka-trim-interval", dest="kafka_trim_interval", type=float)
        parser.add_argument("--kafka-option", dest="kafka_option", action="append", default=None,
                            metavar="KEY=VALUE",
                            help="a librdkafka property of the progress clients, e.g. fetch.wait.max.ms=10 "
                                 "(repeatable)")
        parser.add_argument("--check-progress", dest="check_progress", action="store_true", default=None)
        parser.add_argument("--progress-trace", dest="progress_trace", metavar="DIR")
        parser.add_argument("--timeout", type=float)
        parser.add_argument("--connect-timeout", dest="connect_timeout", type=float)
        parser.add_argument("--stall-warn", dest="stall_warn", type=float)
        parser.add_argument("--broker-timeout", dest="broker_timeout", type=float)
        parser.add_argument("-j", "--join", type=int)
        parser.add_argument("--nn", type=int)
        parser.add_argument("--secret-file", dest="secret_file")
        parser.add_argument("--no-rescaling", dest="rescaling", action="store_false", default=None)
        parser.add_argument("--state-log-every", dest="state_log_every", type=int)
        parser.add_argument("--rebalance")
        parser.add_argument("--migration")
        parser.add_argument("--checkpoint")
        parser.add_argument("--checkpoint-interval", dest="checkpoint_interval", type=int)
        parser.add_argument("--checkpoint-name", dest="checkpoint_name")
        parser.add_argument("--checkpoint-compact-keys", dest="checkpoint_compact_keys", type=int)
        parser.add_argument("--metrics-port", dest="metrics_port", type=int)
        parser.add_argument("--gc-full-after", dest="gc_full_after", type=int)
        parser.add_argument("--source-read-ahead", dest="source_read_ahead", type=str, metavar="BYTES",
                            help="bytes a Kafka source may read past what its dataflow finished (8M; 0: no bound)")
        parser.add_argument("--exchange-credit", dest="exchange_credit", type=str, metavar="BYTES",
                            help="bytes in flight to a worker of another process per channel before the "
                                 "sources hold back (16M; 0: no credit)")
        try:
            args, extra = parser.parse_known_args(list(argv))
        except SystemExit:
            raise ConfigError(f"malformed arguments: {list(argv)}") from None
        _refuse_unknown_options(parser, extra)
        values: dict[str, Any] = {}
        path = args.config or env.get("TIMELY_CONFIG")
        if path:
            values.update(cls.from_toml(path))
        for key, name, conv in (("workers", "TIMELY_WORKERS", int), ("processes", "TIMELY_PROCESSES", int),
                                ("process", "TIMELY_PROCESS", int), ("hostfile", "TIMELY_HOSTFILE", str),
                                ("progress_mode", "TIMELY_PROGRESS_MODE", str),
                                ("kafka_bootstrap", "TIMELY_KAFKA_BOOTSTRAP", str),
                                ("kafka_prefix", "TIMELY_KAFKA_PREFIX", str),
                                ("check_progress", "TIMELY_CHECK_PROGRESS", lambda v: v not in ("", "0")),
                                ("progress_trace", "TIMELY_PROGRESS_TRACE", str),
                                ("timeout", "TIMELY_TIMEOUT", float),
                                ("connect_timeout", "TIMELY_CONNECT_TIMEOUT", float),
                                ("stall_warn", "TIMELY_STALL_WARN", float),
                                ("broker_timeout", "TIMELY_BROKER_TIMEOUT", float),
                                ("rebalance", "TIMELY_REBALANCE", str),
                                ("migration", "TIMELY_MIGRATION", str),
                                ("checkpoint", "TIMELY_CHECKPOINT", str),
                                ("worker_mode", "TIMELY_WORKER_MODE", str),
                                ("checkpoint_interval", "TIMELY_CHECKPOINT_INTERVAL", int),
                                ("checkpoint_compact_keys", "TIMELY_CHECKPOINT_COMPACT_KEYS", int),
                                ("metrics_port", "TIMELY_METRICS_PORT", int),
                                ("gc_full_after", "TIMELY_GC_FULL_AFTER", int),
                                ("source_read_ahead", "TIMELY_SOURCE_READ_AHEAD", str),
                                ("exchange_credit", "TIMELY_EXCHANGE_CREDIT", str),
                                ("rescaling", "TIMELY_RESCALING", lambda v: v not in ("", "0", "false", "off"))):
            if name in env:
                try:
                    values[key] = conv(env[name])
                except ValueError:
                    raise ConfigError(f"environment {name}={env[name]!r} is not valid") from None
        for key, value in vars(args).items():
            if key not in ("config", "kafka_option") and value is not None:
                values[key] = value
        for item in args.kafka_option or ():
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise ConfigError(f"--kafka-option {item!r} is not KEY=VALUE")
            values.setdefault("kafka_options", {})[name] = int(value) if value.isdigit() else value
        for key in ("source_read_ahead", "exchange_credit"):
            if isinstance(values.get(key), str):
                values[key] = parse_bytes(values[key], key)
        config = cls(**values, extra=extra)
        if config.hostfile:
            config.addresses = read_hostfile(config.hostfile)
        return config.validate()

    def address_of(self, process: int) -> tuple[str, int]:
        if self.addresses:
            if process >= len(self.addresses):
                raise ConfigError(f"hostfile lists {len(self.addresses)} addresses, process {process} has none")
            host, _, port = self.addresses[process].rpartition(":")
            return host, int(port)
        return "127.0.0.1", self.base_port + process


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str, setting: str) -> int:
    """A number of bytes, with an optional binary unit: ``512K``, ``16M``, ``1G`` (or
    ``KiB``/``MiB``/``GiB``).

    >>> parse_bytes("16M", "x"), parse_bytes("512KiB", "x"), parse_bytes("0", "x")
    (16777216, 524288, 0)
    >>> parse_bytes("lots", "source_read_ahead")
    Traceback (most recent call last):
    ...
    timely.config.ConfigError: source_read_ahead must be a number of bytes such as 16M, 512K or 0, got 'lots'
    """
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[:len(value) - len(unit)].strip()
    if not number.isdigit():
        raise ConfigError(f"{setting} must be a number of bytes such as 16M, 512K or 0, got {text!r}")
    return int(number) * _UNITS[unit]


def _refuse_unknown_options(parser: argparse.ArgumentParser, extra: list[str]) -> None:
    """Raise a ConfigError for the first option in ``extra`` (a ``-x`` or ``--name``
    argument that is not a number), naming the closest option ``parser`` declares."""
    for arg in extra:
        if len(arg) < 2 or not arg.startswith("-") or _is_number(arg):
            continue
        flag = arg.split("=", 1)[0]
        known = [o for action in parser._actions for o in action.option_strings]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown option {flag!r}: neither the program nor timely declares it{hint}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_hostfile(path: str) -> list[str]:
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        raise ConfigError(f"hostfile {path!r} does not exist") from None
    for line in lines:
        host, sep, port = line.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"hostfile {path!r}: {line!r} is not host:port")
    return lines


def log_to_stderr(level: int = logging.INFO) -> None:
    """For programs (not the library): show timely's and broker's log lines (joins,
    bootstrap, refused connections) at ``level``, and other libraries' warnings."""
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    for name in ("timely", "broker"):
        logging.getLogger(name).setLevel(level)
