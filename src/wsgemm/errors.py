"""Exceptions raised by wsgemm.

Every message says what was passed, what is supported, and what to do about it.
The classes also derive from the built-in exception a user would expect
(``TypeError`` for wrong types, ``ValueError`` for wrong values, ``RuntimeError``
for an unusable device), so ``except ValueError`` keeps working for callers that
do not know about wsgemm.
"""

from __future__ import annotations


class WsgemmError(Exception):
    """Base class of every error wsgemm raises on purpose."""


class UnsupportedDeviceError(WsgemmError, RuntimeError):
    """The GPU (or the lack of one) cannot run any wsgemm kernel."""


class DeviceError(WsgemmError, ValueError):
    """Tensors on the CPU, on different devices, or not where ``out`` lives."""


class UnsupportedDtypeError(WsgemmError, TypeError):
    """An operand or output dtype that no wsgemm kernel implements."""


class ShapeError(WsgemmError, ValueError):
    """Operand shapes that do not form a matrix product."""


class ConfigError(WsgemmError, ValueError):
    """A ``GemmConfig`` that is invalid or exceeds a hardware budget."""
