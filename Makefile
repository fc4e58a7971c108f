# pytimely: `make test` sets everything up from nothing but Python 3.11, gcc and Java 17.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: test run demos bench build clean

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml setup.py
	$(PIP) install -q "Cython>=3.0" "setuptools>=65" wheel
	$(PIP) install -q -e ".[test,bench]"
	touch $(STAMP)

# Rebuild the extensions whenever a .pyx/.pxd changes (editable installs do not).
build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

test: build
	$(PY) -c "import timely.progress as p, timely.hashing as h, timely.megaphone.bins as b, timely.dataflow.exchange as x, timely.communication.codec as c, timely.checkpoint.tracked as t, timely.checkpoint.binlog as l; assert p.implementation() == h.IMPLEMENTATION == b.IMPLEMENTATION == x.IMPLEMENTATION == c.IMPLEMENTATION == t.IMPLEMENTATION == l.IMPLEMENTATION == 'cython', 'Cython twins did not build'"
	$(PY) -m pytest

bench: build
	$(PY) benchmarks/hotpaths.py
	$(PY) benchmarks/barrier.py
	$(PY) benchmarks/wordcount.py
	$(PY) benchmarks/scaleout.py

# The main job: Spark -> Kafka -> a growing pytimely cluster -> Kafka -> Spark's check,
# on an embedded broker (Tansu from PyPI) and local Spark, both started and stopped here.
run: build
	$(PY) examples/pipeline/run.py

demos: build
	$(PY) examples/rescaling_demo.py
	$(PY) examples/wordcount.py -w 2
	$(PY) examples/wcc.py -w 2 --vertices 2000 --edges 1500 --epochs 5

clean:
	rm -rf build *.egg-info pyx/*.c timely/*.so timely/checkpoint/*.so timely/progress/*.so timely/megaphone/*.so timely/dataflow/*.so timely/communication/*.so
