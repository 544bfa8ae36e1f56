"""One-off studies, each headed by its question, when it ran, its result and its
conclusion, with a link to its topic in the tuning log (docs/tuning-log/). Kept so
that a result can be rerun: ``python -m benchmarks.studies.<study>`` from the
repository root."""
