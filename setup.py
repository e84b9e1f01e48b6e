"""The one compiled part of kraftwerk: the fleet pipeline's decoder (pipeline/_columnar.c).

Everything else about the package is in pyproject.toml. The extension is optional: when
it cannot be built (no C compiler), installation goes on and pipeline/columnar.py reads
with its pure-Python path, which gives the same rows (tests/pipeline_source/test_columnar.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pipeline._columnar", sources=["pipeline/_columnar.c"], optional=True)])
