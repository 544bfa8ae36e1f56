"""wsgemm's benchmarks, a package so that its scripts share ``benchmarks.harness``.

Run a script as a module from the repository root, with wsgemm installed
(``pip install -e .``)::

    python -m benchmarks.suite --suite quick

The scripts a user runs sit here (see README.md); maintainer tools are in
``benchmarks.maint``, one-off studies in ``benchmarks.studies``.
"""
