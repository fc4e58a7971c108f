"""Shared fixtures for the progress-core tests: the twin parameter and hypothesis profiles.

Protects: every hot-path class (ChangeBatch, MutableAntichain, Tracker) is tested in
both of its twins, the compiled one ("cython") and the pure-Python one ("python"), so
they cannot drift apart. A Cython twin that is not importable makes its tests FAIL
(CI must notice a broken build) unless ``TIMELY_NO_CYTHON=1`` says the build was
skipped on purpose, in which case those tests are skipped with that reason.

A test module may set ``TWIN_NEEDS = ("ChangeBatch",)`` (say) to fail only when a class
it actually uses is missing; the default is all three. Megaphone's hash twins come the
same way (fixtures ``bins_twin`` and ``compiled_bins``, ``TWIN_NEEDS = ("bins",)``), and
so does the ``Exchange`` partition (fixtures ``exchange_twin`` and ``compiled_exchange``,
``TWIN_NEEDS = ("exchange",)``), the wire codec (fixtures ``codec_twin`` and
``compiled_codec``, ``TWIN_NEEDS = ("codec",)``), and checkpoints' ``TrackedDict``
(fixtures ``tracked_twin`` and ``compiled_tracked``, ``TWIN_NEEDS = ("tracked",)``), and
the fixed windows' fold (fixture ``windows_twin``, ``TWIN_NEEDS = ("windows",)``); the
codec's twins include ``pack_items``, which packs a checkpoint delta's items.

Hypothesis: profile "ci" (the default) and "nightly" (many more cases), selected by
``HYPOTHESIS_PROFILE``; both derandomized with no example database, so a CI run is
reproducible.
"""
from __future__ import annotations

import importlib
import os
import uuid
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings

# The in-process tests look at their workers' objects once ``execute`` returns, and this
# process holds Kafka clients of its own (fixtures, readers), which a fork cannot carry
# (librdkafka is not fork-safe): here ``-w`` workers are threads unless a test asks for
# processes (``tests/test_forked.py``). Processes started by the tests inherit this, and
# run as clusters (``-n``) anyway.
os.environ["TIMELY_WORKER_MODE"] = "threads"

from timely import progress

# ---- hypothesis profiles -------------------------------------------------------------
_COMMON = dict(
    derandomize=True,        # same cases on every run: CI failures reproduce
    database=None,           # no .hypothesis/ state carried between runs
    deadline=None,           # machines are shared and noisy; speed is benchmarks' job
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("nightly", max_examples=10_000, **_COMMON)
settings.register_profile("dev", max_examples=50, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# ---- the twins -----------------------------------------------------------------------
TWIN_CLASSES = ("ChangeBatch", "MutableAntichain", "Tracker")
_MODULES = {"ChangeBatch": "change_batch", "MutableAntichain": "antichain",
            "Tracker": "reachability"}
NO_CYTHON = os.environ.get("TIMELY_NO_CYTHON") == "1"


def _load_twin(name: str) -> SimpleNamespace:
    """A namespace with the three classes of twin ``name``; ``missing`` maps the class
    names that could not be imported to the reason (the import error)."""
    ns = SimpleNamespace(name=name, missing={})
    for cls_name in TWIN_CLASSES:
        found = progress.twins(cls_name)
        if name in found:
            setattr(ns, cls_name, found[name])
            continue
        setattr(ns, cls_name, None)
        module = f"timely.progress._c{_MODULES[cls_name]}"
        try:
            importlib.import_module(module)
            reason = f"{module} imports but has no {cls_name}"
        except Exception as exc:  # noqa: BLE001 - the reason is what we report
            reason = f"import {module}: {type(exc).__name__}: {exc}"
        ns.missing[cls_name] = reason
    return ns


_TWINS = {name: _load_twin(name) for name in ("python", "cython")}


def _load_module_twin(name: str, key: str, module: str, pure: dict) -> SimpleNamespace:
    """The functions of a compiled hot-path module, or their pure twins: ``pure`` maps
    each name to its pure twin, and the compiled ``module`` has the same names. If the
    module cannot be imported, ``missing`` says why under ``key`` (list it in a test
    module's ``TWIN_NEEDS``)."""
    if name == "python":
        return SimpleNamespace(name=name, missing={}, **pure)
    try:
        found = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - the reason is what we report
        return SimpleNamespace(name=name, missing={key: f"import {module}: {type(exc).__name__}: {exc}"},
                               **{attr: None for attr in pure})
    return SimpleNamespace(name=name, missing={}, **{attr: getattr(found, attr) for attr in pure})


def _load_bins_twin(name: str) -> SimpleNamespace:
    """Megaphone's hot path of twin ``name``: ``stable_hash64`` (``timely.hashing``),
    ``group_by_bin`` and ``group_by_target`` (``timely.megaphone.bins``: F), ``apply_fold``
    ``fold_bins`` and ``split_held`` (``timely.megaphone.state``: S)."""
    from timely import hashing
    from timely.megaphone import bins
    hash_twin = _load_module_twin(name, "bins", "timely._chash", {"stable_hash64": hashing.py_stable_hash64})
    from timely.megaphone import state
    bins_twin = _load_module_twin(name, "bins", "timely.megaphone._cbins",
                                  {"group_by_bin": bins.py_group_by_bin, "group_by_target": bins.py_group_by_target,
                                   "apply_fold": state.py_apply_fold, "fold_bins": state.py_fold_bins,
                                   "split_held": state.py_split_held})
    return SimpleNamespace(name=name, missing={**hash_twin.missing, **bins_twin.missing},
                           stable_hash64=hash_twin.stable_hash64, group_by_bin=bins_twin.group_by_bin,
                           group_by_target=bins_twin.group_by_target, apply_fold=bins_twin.apply_fold,
                           fold_bins=bins_twin.fold_bins, split_held=bins_twin.split_held)


def _load_exchange_twin(name: str) -> SimpleNamespace:
    """The ``Exchange`` partition and route (``timely.dataflow.exchange``) of twin ``name``."""
    from timely.dataflow import exchange
    return _load_module_twin(name, "exchange", "timely.dataflow._cexchange",
                             {"partition": exchange.py_partition, "route": exchange.py_route})


def _load_codec_twin(name: str) -> SimpleNamespace:
    """The wire codec (``packb``, a ``Decoder`` class and ``pack_items``) of twin ``name``."""
    from timely.communication import codec
    return _load_module_twin(name, "codec", "timely.communication._ccodec",
                             {"packb": codec.py_packb, "Decoder": codec.PyDecoder,
                              "pack_items": codec.py_pack_items})


def _load_tracked_twin(name: str) -> SimpleNamespace:
    """Checkpoints' ``TrackedDict`` of twin ``name``."""
    from timely.checkpoint import tracked
    return _load_module_twin(name, "tracked", "timely.checkpoint._ctracked", {"TrackedDict": tracked.PyTrackedDict})


def _load_windows_twin(name: str) -> SimpleNamespace:
    """The fixed windows' fold (``timely.windows.open.absorb_fixed``) of twin ``name``."""
    from timely.windows import open as opened
    return _load_module_twin(name, "windows", "timely.windows._cwindows", {"absorb_fixed": opened.py_absorb_fixed})


_BINS_TWINS = {name: _load_bins_twin(name) for name in ("python", "cython")}
_TRACKED_TWINS = {name: _load_tracked_twin(name) for name in ("python", "cython")}
_EXCHANGE_TWINS = {name: _load_exchange_twin(name) for name in ("python", "cython")}
_CODEC_TWINS = {name: _load_codec_twin(name) for name in ("python", "cython")}
_WINDOWS_TWINS = {name: _load_windows_twin(name) for name in ("python", "cython")}


def _needs(item) -> tuple[str, ...]:
    module = getattr(item, "module", None)
    return tuple(getattr(module, "TWIN_NEEDS", TWIN_CLASSES))


def _missing_for(item) -> list[str]:
    """Reasons why a twin this test uses lacks a class the test needs."""
    reasons = []
    for value in getattr(item, "funcargs", {}).values():
        twins = value if isinstance(value, tuple) else (value,)
        for ns in twins:
            if isinstance(ns, SimpleNamespace) and getattr(ns, "missing", None):
                for cls_name in _needs(item):
                    if cls_name in ns.missing:
                        reasons.append(f"{ns.name} {cls_name}: {ns.missing[cls_name]}")
    return reasons


def _uses_cython(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "cython" in (callspec.params.get("twin"), callspec.params.get("bins_twin"),
                                             callspec.params.get("exchange_twin"),
                                             callspec.params.get("codec_twin"),
                                             callspec.params.get("tracked_twin"),
                                             callspec.params.get("windows_twin")):
        return True
    return bool({"both_twins", "compiled_bins", "compiled_exchange", "compiled_codec", "compiled_tracked"}
                & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
    """With TIMELY_NO_CYTHON=1, skip the Cython-twin tests whose classes are not built."""
    if not NO_CYTHON:
        return
    missing = {**_TWINS["cython"].missing, **_BINS_TWINS["cython"].missing,
               **_EXCHANGE_TWINS["cython"].missing, **_CODEC_TWINS["cython"].missing,
               **_TRACKED_TWINS["cython"].missing, **_WINDOWS_TWINS["cython"].missing}
    for item in items:
        if _uses_cython(item):
            absent = [c for c in _needs(item) if c in missing]
            if absent:
                item.add_marker(pytest.mark.skip(
                    reason=f"TIMELY_NO_CYTHON=1: Cython twin of {', '.join(absent)} not built"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test run against a twin that is not importable FAILS (not errors, not skips)."""
    reasons = _missing_for(pyfuncitem)
    if reasons:
        pytest.fail("Cython twin not importable (set TIMELY_NO_CYTHON=1 to skip on purpose): "
                    + "; ".join(reasons), pytrace=False)
    return None


@pytest.fixture(scope="session", params=["python", "cython"])
def twin(request) -> SimpleNamespace:
    """ChangeBatch, MutableAntichain and Tracker of one twin (``twin.name``)."""
    return _TWINS[request.param]


@pytest.fixture(scope="session")
def both_twins() -> tuple[SimpleNamespace, SimpleNamespace]:
    """(python twin, cython twin), for tests that run both on the same inputs."""
    return _TWINS["python"], _TWINS["cython"]


@pytest.fixture(scope="session", params=["python", "cython"])
def bins_twin(request) -> SimpleNamespace:
    """``stable_hash64`` and ``group_by_bin`` of one twin (``bins_twin.name``)."""
    return _BINS_TWINS[request.param]


@pytest.fixture(scope="session")
def compiled_bins() -> SimpleNamespace:
    """The compiled twin of ``stable_hash64`` / ``group_by_bin``, to compare with the pure one."""
    return _BINS_TWINS["cython"]


@pytest.fixture(scope="session", params=["python", "cython"])
def exchange_twin(request) -> SimpleNamespace:
    """``partition`` and ``route`` of one twin (``exchange_twin.name``)."""
    return _EXCHANGE_TWINS[request.param]


@pytest.fixture(scope="session")
def compiled_exchange() -> SimpleNamespace:
    """The compiled twin of ``partition`` and ``route``, to compare with the pure ones."""
    return _EXCHANGE_TWINS["cython"]


@pytest.fixture(scope="session", params=["python", "cython"])
def codec_twin(request) -> SimpleNamespace:
    """``packb`` and ``Decoder`` of one twin of the wire codec (``codec_twin.name``)."""
    return _CODEC_TWINS[request.param]


@pytest.fixture(scope="session")
def compiled_codec() -> SimpleNamespace:
    """The compiled twin of the wire codec, to compare with the pure one (the library)."""
    return _CODEC_TWINS["cython"]


@pytest.fixture(scope="session", params=["python", "cython"])
def tracked_twin(request) -> SimpleNamespace:
    """``TrackedDict`` of one twin (``tracked_twin.name``)."""
    return _TRACKED_TWINS[request.param]


@pytest.fixture(scope="session")
def compiled_tracked() -> SimpleNamespace:
    """The compiled twin of ``TrackedDict``, to compare with the pure one."""
    return _TRACKED_TWINS["cython"]


@pytest.fixture(scope="session", params=["python", "cython"])
def windows_twin(request) -> SimpleNamespace:
    """``absorb_fixed``, the fixed windows' fold, of one twin (``windows_twin.name``)."""
    return _WINDOWS_TWINS[request.param]


@pytest.fixture(scope="session")
def pure() -> SimpleNamespace:
    """The pure-Python twin only (for timestamps the compiled twin does not accept)."""
    return _TWINS["python"]



@pytest.fixture(params=["p2p", "kafka"])
def mode(request):
    """The progress mode of a test cluster: the arguments every one of its processes
    gets (for Kafka, the session broker and a topic prefix of its own)."""
    if request.param == "p2p":
        return []
    broker = request.getfixturevalue("tansu")
    return ["--progress-mode", "kafka", "--kafka-bootstrap", broker.bootstrap,
            "--kafka-prefix", f"c{uuid.uuid4().hex[:10]}"]


@pytest.fixture(scope="session")
def tansu():
    """A real Kafka-protocol broker (Tansu) on a free 127.0.0.1 port, for the whole run."""
    from kafka_broker import TansuBroker
    broker = TansuBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (starting one takes seconds), with the
    ``timely-kafka`` data source registered."""
    from timely.connectors.spark import local_session
    session = local_session("pytimely-tests")
    try:
        yield session
    finally:
        session.stop()
