# pytimely: `make test` sets everything up from nothing but Python 3.11, gcc and Java 17.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test run demos bench build clean

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml setup.py
	$(PIP) install -q "Cython>=3.0" "setuptools>=65" wheel
	$(PIP) install -q -e ".[test,bench]"
	touch $(STAMP)

# Debian's Chromium for the status page's browser tests (tests/browser.py drives it with
# Playwright, which never downloads a browser). Installed only when missing.
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "the browser tests need Chromium at $(CHROMIUM); there is no apt-get here to install Debian's 'chromium' package"; exit 2; }
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	@test -x $(CHROMIUM) || { echo "apt-get installed chromium, yet $(CHROMIUM) is missing"; exit 2; }

# Rebuild the extensions whenever a .pyx/.pxd changes (editable installs do not), and
# cache the package's bytecode: with PYTHONDONTWRITEBYTECODE set (as on these machines)
# every process (a dataflow process, a joiner, a Spark worker) compiled it again, ~0.1 s.
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace
	$(PY) -m compileall -q timely

test: build $(CHROMIUM)
	$(PY) -c "import timely.progress as p, timely.hashing as h, timely.megaphone.bins as b, timely.dataflow.exchange as x, timely.communication.codec as c, timely.checkpoint.tracked as t, timely.windows.open as w, timely.connectors.kafka.shared_values as v; assert p.implementation() == h.IMPLEMENTATION == b.IMPLEMENTATION == x.IMPLEMENTATION == c.IMPLEMENTATION == t.IMPLEMENTATION == w.IMPLEMENTATION == v.IMPLEMENTATION == 'cython', 'Cython twins did not build'"
	$(PY) -m pytest

bench: build
	$(PY) benchmarks/hotpaths.py
	$(PY) benchmarks/barrier.py
	$(PY) benchmarks/wordcount.py
	$(PY) benchmarks/scaleout.py

# The main job: Spark -> Kafka -> a growing pytimely cluster -> Kafka -> Spark's check,
# on an embedded broker (Tansu from PyPI) and local Spark, both started and stopped here;
# `make run SPARK_MASTER=spark://HOST:7077` runs Spark's side on that cluster instead.
run: build
	$(PY) examples/pipeline/run.py

demos: build
	$(PY) examples/rescaling_demo.py
	$(PY) examples/wordcount.py -w 2
	$(PY) examples/wcc.py -w 2 --vertices 2000 --edges 1500 --epochs 5

clean:
	rm -rf build *.egg-info pyx/*.c timely/*.so timely/checkpoint/*.so timely/progress/*.so timely/megaphone/*.so timely/dataflow/*.so timely/communication/*.so
