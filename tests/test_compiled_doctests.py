"""The compiled twins' docstring examples run, as the pure modules' do (pytest's
``--doctest-modules`` only collects ``.py`` files, so it never sees an extension module).

Protects: the examples in ``pyx/*.pyx`` are what a reader copies; a compiled twin whose
examples fail, or that is not built (unless ``TIMELY_NO_CYTHON=1`` says so), fails here.
"""
import doctest
import importlib
import os

import pytest

MODULES = ["timely.progress._cchange_batch", "timely.progress._cantichain", "timely.progress._creachability",
           "timely.megaphone._cbins", "timely.dataflow._cexchange", "timely.communication._ccodec"]


@pytest.mark.parametrize("name", MODULES)
def test_compiled_module_examples_pass(name):
    if os.environ.get("TIMELY_NO_CYTHON") == "1":
        pytest.skip("TIMELY_NO_CYTHON=1: the compiled twins were not built on purpose")
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, result
