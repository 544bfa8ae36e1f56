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
