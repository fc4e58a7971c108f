"""Build the Cython hot paths in pyx/ as extension modules inside the timely package.

``EXTENSIONS`` lists them as (module name, .pyx path) pairs: the progress core's
``timely.progress._c*``, the key hash ``timely._chash``, Megaphone's
``timely.megaphone._cbins`` and the ``Exchange`` partition ``timely.dataflow._cexchange``
(the last three share the stable hash of ``pyx/_stable_hash.pxd``), the cluster's
wire codec ``timely.communication._ccodec``, checkpoints' ``timely.checkpoint._ctracked``
the fixed windows' fold ``timely.windows._cwindows`` and the Kafka source's shared
field values ``timely.connectors.kafka._cshared_values``.

When Cython or a C compiler is missing the package still installs (or set
``TIMELY_NO_CYTHON=1`` to skip the build): each module then uses its pure-Python twin
(see timely.progress.implementation(), timely.hashing.IMPLEMENTATION,
timely.megaphone.bins.IMPLEMENTATION,
timely.dataflow.exchange.IMPLEMENTATION and timely.communication.codec.IMPLEMENTATION).
"""
import os
from setuptools import setup

EXTENSIONS = [(f"timely.progress._c{name}", f"pyx/_c{name}.pyx")
              for name in ["change_batch", "antichain", "reachability"]]
EXTENSIONS += [("timely._chash", "pyx/_chash.pyx"),
               ("timely.megaphone._cbins", "pyx/_cbins.pyx"),
               ("timely.dataflow._cexchange", "pyx/_cexchange.pyx"),
               ("timely.communication._ccodec", "pyx/_ccodec.pyx"),
               ("timely.checkpoint._ctracked", "pyx/_ctracked.pyx"),
               ("timely.windows._cwindows", "pyx/_cwindows.pyx"),
               ("timely.connectors.kafka._cshared_values", "pyx/_cshared_values.pyx")]

ext_modules = []
if os.environ.get("TIMELY_NO_CYTHON") != "1":
    from Cython.Build import cythonize
    from setuptools import Extension

    ext_modules = cythonize(
        [
            Extension(module, [path], extra_compile_args=["-O2"])
            for module, path in EXTENSIONS
            if os.path.exists(path)
        ],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        include_path=["pyx"],
    )

setup(ext_modules=ext_modules)
