"""Whether the Kafka broker can be reached: one line when it is lost, one when it is back.

librdkafka retries a lost broker on its own, and says so on every attempt: about 25
log lines a second per process, for as long as the outage lasts. Every client of the
process (timely's connectors and checkpoints, broker/'s progress log) is built with
``hooks(bootstrap)``, which sends those lines here instead:

- a client's transport error (``_TRANSPORT``, ``_ALL_BROKERS_DOWN``, ...) makes the
  address *suspect*; a prober thread then asks the broker for its API versions (one
  small request on a socket of its own). An answer clears the suspicion without a word
  (an idle connection closed by the broker is not an outage); no answer marks the
  address *down*, logged once, and the prober asks again with backoff (0.25 s to 2 s)
  until the broker answers: *up* again, logged once with how long it was down;
- a broker that answers again must still have the topics the process uses
  (``expect``): one without them restarted empty, and ``failure()`` says so
  (``BrokerLostError``) rather than let a source read again from the start;
- librdkafka's per-attempt lines about connections (facility ``FAIL``, "brokers are
  down", connect/receive failures) are counted (``errors``) and logged at DEBUG only;
  every other line of the client passes through as it was;
- while down, a line every ``REMIND`` seconds says for how long, and after ``timeout``
  seconds (``Config.broker_timeout``, ``--broker-timeout``, default 300) ``failure()``
  returns a ``BrokerUnreachable`` naming the address, which a worker raises at its next
  step: the process exits non-zero, and a supervisor's restart resumes from the
  checkpoint.

``states()`` gives every address's figures to the metrics (``timely_kafka_broker_up``)
and the status page. Costs: nothing while the broker answers; one probe per backoff
period while it does not; a filtered log line costs one regular expression match.

>>> h = Health("127.0.0.1:1", timeout=60)
>>> h.up, h.failure() is None
(True, True)
"""
from __future__ import annotations

import logging
import re
import socket
import struct
import threading
import time
from typing import Any, Callable, Iterable, Optional

from .client import BrokerError, BrokerLostError

log = logging.getLogger("broker.health")
rdlog = logging.getLogger("broker.rdkafka")

#: seconds between the lines saying the broker is still down
REMIND = 30.0
#: the prober's backoff while the broker does not answer
BACKOFF = (0.25, 2.0)
#: librdkafka error codes that mean the connection, not the request, failed
_TRANSPORT_CODES = {-195, -187, -185, -193}      # _TRANSPORT, _ALL_BROKERS_DOWN, _TIMED_OUT, _RESOLVE
_CONNECTION_LINE = re.compile(r"^FAIL\b|brokers are down|Connect to .* failed|Receive failed|"
                              r"Send failed|Connection refused|Disconnected|timed out", re.IGNORECASE)


class BrokerUnreachable(BrokerError):
    """No broker answered at an address for longer than the broker timeout."""


def probe(bootstrap: str, timeout: float = 2.0) -> Optional[str]:
    """None if some broker of ``bootstrap`` answers an ApiVersions request within
    ``timeout``, else why not (the last address's error)."""
    why = "no address"
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as sock:
                sock.settimeout(timeout)
                client = b"timely-health"
                # request header v1: api_key 18 (ApiVersions), version 0, correlation id, client id
                body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
                sock.sendall(struct.pack(">i", len(body)) + body)
                head = _recv(sock, 8)
                if struct.unpack(">ii", head)[1] == 7:
                    return None
                why = f"{address}: answered with another correlation id"
        except (OSError, ValueError, struct.error) as e:
            why = f"{address}: {e}"
    return why


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


class Health:
    """The reachability of one bootstrap address (see the module)."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self.up = True
        self.down_since: Optional[float] = None
        self.errors = 0                 # librdkafka transport errors and lines, counted
        self.outages = 0
        self._lock = threading.Lock()
        self._prober: Optional[threading.Thread] = None
        self._why = ""
        self.topics: set[str] = set()               # see expect
        self.gone: Optional[BrokerLostError] = None  # it came back without them

    # ---- what the clients report ---------------------------------------------------------
    def suspect(self, why: str) -> None:
        """A client lost its connection: find out whether the broker still answers."""
        with self._lock:
            self.errors += 1
            self._why = why
            if self._prober is not None or self.gone is not None:
                return
            prober = self._prober = threading.Thread(target=self._probe_loop, daemon=True,
                                                     name=f"broker-health {self.bootstrap}")
        prober.start()

    def error_cb(self, then: Optional[Callable[[Any], None]] = None) -> Callable[[Any], None]:
        """A librdkafka ``error_cb``: transport errors make the address suspect; every
        error goes on to ``then`` (the client's own handler), if any."""
        def on_error(err: Any) -> None:
            try:
                if err.code() in _TRANSPORT_CODES:
                    self.suspect(err.str())
            except Exception:           # noqa: BLE001 - never raise into librdkafka's poll
                log.exception("broker.health: handling a client error of %s", self.bootstrap)
            if then is not None:
                then(err)
        return on_error

    def failure(self) -> Optional[BrokerError]:
        """The error to stop with: the broker came back empty (``BrokerLostError``), or
        it has been down longer than the timeout (``BrokerUnreachable``)."""
        if self.gone is not None:
            return self.gone
        since = self.down_since
        if since is None or time.monotonic() - since < self.timeout:
            return None
        return BrokerUnreachable(f"the Kafka broker at {self.bootstrap} has not answered for "
                                 f"{time.monotonic() - since:.0f} s (--broker-timeout {self.timeout:g}): "
                                 f"{self._why}")

    def state(self) -> dict:
        since = self.down_since
        return {"address": self.bootstrap, "up": self.up, "errors": self.errors, "outages": self.outages,
                "down_seconds": None if since is None else round(time.monotonic() - since, 1)}

    # ---- the prober -----------------------------------------------------------------------
    def _probe_loop(self) -> None:
        delay, reminded = BACKOFF[0], time.monotonic()
        try:
            while _health.get(self.bootstrap) is self:       # else a later computation forgot it
                why = probe(self.bootstrap)
                now = time.monotonic()
                if why is None:
                    missing = self._missing()
                    if missing is None:
                        why = "it answered, but not a request for its topics"
                if why is None:
                    if missing:
                        self._lost(missing)
                        return
                    if not self.up:
                        log.warning("the Kafka broker at %s is back after %.1f s (%d client errors "
                                    "meanwhile)", self.bootstrap, now - self.down_since, self.errors)
                    self.up, self.down_since = True, None
                    down.discard(self)
                    return
                if self.up:
                    self.up, self.down_since = False, now
                    with _lock:
                        if _health.get(self.bootstrap) is self:
                            down.add(self)
                    self.outages += 1
                    reminded = now
                    log.warning("lost the Kafka broker at %s (%s); waiting for it, up to %g s "
                                "(--broker-timeout)", self.bootstrap, why, self.timeout)
                elif now - reminded >= REMIND:
                    reminded = now
                    log.warning("the Kafka broker at %s is still unreachable, for %.0f s (%s)",
                                self.bootstrap, now - self.down_since, why)
                time.sleep(delay)
                delay = min(BACKOFF[1], delay * 2)
        finally:
            with self._lock:
                self._prober = None


    def _missing(self) -> Optional[list[str]]:
        """The topics of ``expect`` the broker no longer has (None: it did not say)."""
        if not self.topics:
            return []
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        try:
            found = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _Lines(self, rdlog)}
                                ).list_topics(timeout=5).topics
        except KafkaException:
            return None
        return sorted(t for t in self.topics if t not in found)

    def _lost(self, missing: list[str]) -> None:
        """The broker came back without topics it had: it restarted empty."""
        if self.gone is not None:
            return
        self.gone = BrokerLostError(
            f"the Kafka broker at {self.bootstrap} no longer has the topics {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''} that this process read or wrote: it restarted without "
            f"its data (the embedded broker keeps everything in memory). Reading again from the start "
            f"or writing the results again would be wrong: this process stops")
        log.error("%s", self.gone)
        with _lock:
            if _health.get(self.bootstrap) is self:
                down.add(self)

    def expect(self, topics: Iterable[str]) -> None:
        """Topics this process reads or writes: once the broker answers again after a
        lost connection, it must still have them."""
        self.topics.update(topics)


class _Lines:
    """A ``logger`` for librdkafka: connection lines are counted, not printed."""

    def __init__(self, health: Health, logger: logging.Logger) -> None:
        self.health = health
        self.logger = logger

    def log(self, level: int, msg: str, *args: Any) -> None:
        try:
            text = msg % args if args else msg
            if _CONNECTION_LINE.search(text):
                self.health.errors += 1
                self.logger.debug("%s", text)
                return
            self.logger.log(level, "%s", text)
        except Exception:               # noqa: BLE001 - never raise into librdkafka's poll
            log.exception("broker.health: a line of a client of %s", self.health.bootstrap)


_health: dict[str, Health] = {}
#: the addresses down now (or back empty): a worker's step reads it, and calls
#: ``failure`` only when it is not empty
down: set = set()
_lock = threading.Lock()
#: seconds a broker may stay unreachable before the process stops (Config.broker_timeout)
_timeout = 300.0
#: set by ``configure``: outside a computation (Spark's tasks, a command line tool)
#: ``retrying`` does not wait, and the caller's own retries (Spark's) apply
_configured = False


def configure(timeout: float) -> None:
    """Start a computation with broker timeout ``timeout`` (``Config.broker_timeout``):
    what earlier computations of this process saw of their brokers is forgotten (their
    probers stop), so an address they lost cannot stop this one."""
    global _timeout, _configured
    with _lock:
        _timeout, _configured = timeout, True
        _health.clear()
        down.clear()


def health(bootstrap: str) -> Health:
    """The one ``Health`` of ``bootstrap`` in this process."""
    with _lock:
        found = _health.get(bootstrap)
        if found is None:
            found = _health[bootstrap] = Health(bootstrap, _timeout)
        return found


def hooks(bootstrap: str, logger: logging.Logger = rdlog,
          error_cb: Optional[Callable[[Any], None]] = None) -> dict:
    """The ``logger`` and ``error_cb`` settings of a librdkafka client of ``bootstrap``."""
    h = health(bootstrap)
    return {"logger": _Lines(h, logger), "error_cb": h.error_cb(error_cb)}


def timeout() -> float:
    """This process's broker timeout, in seconds."""
    return _timeout


#: error codes of a call that the broker being away explains: _WAIT_COORD, _TIMED_OUT,
#: REQUEST_TIMED_OUT, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, and the transport's
_RETRY_CODES = _TRANSPORT_CODES | {-180, 7, 15, 16}


def retrying(bootstrap: str, call: Callable[[], Any]) -> Any:
    """``call()``, called again (backoff 0.25 s to 2 s) while it fails because the broker
    of ``bootstrap`` is away, up to the broker timeout of this computation (outside one:
    once); then the last error is raised."""
    from confluent_kafka import KafkaException
    h, delay = health(bootstrap), BACKOFF[0]
    deadline = time.monotonic() + (_timeout if _configured else 0.0)
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if hasattr(err, "code") else None
            if code not in _RETRY_CODES or time.monotonic() >= deadline:
                raise
            h.suspect(err.str())
        time.sleep(delay)
        delay = min(BACKOFF[1], delay * 2)


def attempt(timeout: float) -> float:
    """One attempt's time-out for a call inside ``retrying``: ``timeout``, but not longer
    than this computation's broker timeout (at least 0.5 s), so that a short
    ``--broker-timeout`` is not outwaited by a client's own 10 s (tests/test_kafka.py's
    unreachable broker is named within its 1 s)."""
    return min(timeout, max(0.5, _timeout)) if _configured else timeout


def in_background(call: Callable[[], Any]) -> Any:
    """``call()`` started on a daemon thread of its own; returns its ``Future``. Not a
    pool's thread: those are joined when the interpreter exits, so a call stuck on a
    broker that never came back kept the process from exiting after its error."""
    from concurrent.futures import Future
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            future.set_exception(exc)
    threading.Thread(target=run, daemon=True, name="broker-call").start()
    return future


def awaited(bootstrap: str, future: Any, what: str) -> Any:
    """The result of ``future`` (from ``in_background``: a blocking client call with no
    timeout of its own, e.g. a synchronous commit), waited for while the broker of
    ``bootstrap`` answers (a line every ``REMIND`` seconds says what waits) or has been
    away for less than the broker timeout; then ``failure()``'s error is raised. The
    call's own errors are raised."""
    from concurrent.futures import TimeoutError as Pending
    h, started, said = health(bootstrap), time.monotonic(), time.monotonic()
    probed = False
    while True:
        try:
            return future.result(timeout=0.5)
        except Pending:
            if not probed and time.monotonic() - started >= 2.0:
                probed = True               # no client may have said the broker is lost
                h.suspect(f"{what} got no answer in 2 s")
            unreachable = h.failure()
            if unreachable is not None:
                raise unreachable from None
            if time.monotonic() - said >= REMIND:
                said = time.monotonic()
                log.warning("%s has waited %.0f s for the Kafka broker at %s", what,
                            said - started, bootstrap)


def failure() -> Optional[BrokerError]:
    """The first address down for longer than the broker timeout or back empty, as an
    error; else None."""
    if not down:
        return None
    for h in list(down):
        found = h.failure()
        if found is not None:
            return found
    return None


def states() -> list[dict]:
    """Every address's figures (see ``Health.state``), for the metrics and status page."""
    return [h.state() for h in list(_health.values())]
