"""Build the Cython hot paths in pyx/ as extension modules inside timely/progress/.

When Cython or a C compiler is missing the package still installs: timely.progress then
uses its pure-Python twins (see timely.progress.implementation()).
"""
import os
from setuptools import setup

ext_modules = []
if os.environ.get("TIMELY_NO_CYTHON") != "1":
    from Cython.Build import cythonize
    from setuptools import Extension

    names = ["change_batch", "antichain", "reachability"]
    ext_modules = cythonize(
        [
            Extension(f"timely.progress._c{name}", [f"pyx/_c{name}.pyx"], extra_compile_args=["-O2"])
            for name in names
            if os.path.exists(f"pyx/_c{name}.pyx")
        ],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        include_path=["pyx"],
    )

setup(ext_modules=ext_modules)
