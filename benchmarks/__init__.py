"""wsgemm's benchmarks, a package so that its scripts share ``benchmarks.harness``.

Run a script as a module from the repository root, with wsgemm installed
(``pip install -e .``)::

    python -m benchmarks.suite --suite quick

The scripts a user runs sit here (see README.md); maintainer tools are in
``benchmarks.maint``, one-off studies in ``benchmarks.studies``.
"""

from pathlib import Path

# The committed reports: plain JSON beside their tables; the tuning log's in tuning-log/.
# Here, not in harness, so that scripts which only read reports need no torch.
RESULTS = Path(__file__).resolve().parent / "results"
