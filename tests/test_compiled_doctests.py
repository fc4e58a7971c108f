"""The compiled twins' docstring examples run, as the pure modules' do (pytest's
``--doctest-modules`` only collects ``.py`` files, so it never sees an extension module).

Protects: the examples in ``pyx/*.pyx`` are what a reader copies; a compiled twin whose
examples fail, or that is not built, fails here (``make test`` always builds them).
"""
import doctest
import importlib

import pytest

MODULES = ["timely.progress._cchange_batch", "timely.progress._cantichain", "timely.progress._creachability",
           "timely._chash", "timely.megaphone._cbins", "timely.dataflow._cexchange", "timely.communication._ccodec",
           "timely.checkpoint._ctracked", "timely.windows._cwindows",
           "timely.connectors.kafka._cshared_values"]


@pytest.mark.parametrize("name", MODULES)
def test_compiled_module_examples_pass(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, result
