"""Maintainer tools: config sweeps, re-tuning and the packaged table, profiles and
traces, result files. Run each as ``python -m benchmarks.maint.<tool>`` from the
repository root; ``--help`` says what it does."""
