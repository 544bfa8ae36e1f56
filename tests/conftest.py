"""Shared test set-up: the ``gpu`` marker runs only where an SM90 GPU is present."""

import pytest


def _sm90_gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


SM90_GPU = _sm90_gpu_available()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs an SM90 (Hopper) CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not SM90_GPU:
            item.add_marker(skip)


@pytest.fixture
def fake_cuda_events(monkeypatch):
    """Stand-ins for ``torch.cuda.Event`` and ``torch.cuda.synchronize``, to test timing
    loops without a GPU: ``install(log, measure)`` makes an event remember how long
    ``log`` was when recorded, and ``elapsed_time`` return ``measure(entries)`` of the
    entries logged between two events."""
    import torch

    def install(log: list, measure):
        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = len(log)

            def elapsed_time(self, end):
                return measure(log[self.at:end.at])

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    return install


@pytest.fixture
def traced_calls():
    """``trace(module, x, target)``: ``torch._dynamo`` traces ``module(x)`` without
    grad; returns the graph-break count and the traced nodes whose target names
    ``target`` (e.g. one of wsgemm's operators)."""
    import torch

    def trace(module, x, target: str):
        with torch.no_grad():
            explanation = torch._dynamo.explain(module)(x)
        nodes = [n for g in explanation.graphs for n in g.graph.nodes if target in str(n.target)]
        return explanation.graph_break_count, nodes

    return trace
