"""Shared NVML helpers of the probes (gpu_inventory, nvlink): every reading NVML refuses becomes an
``{"nvml_error": ...}`` placeholder, never a value that could pass for healthy. Standard library only
(the caller passes the pynvml module in).
"""
from __future__ import annotations


def nvml_error(exc: BaseException) -> dict:
    """Return ``{"nvml_error": ...}`` for an exception raised by (or around) an NVML call.

    An ``NVMLError`` gives its own string (``"Not Supported"``, ``"GPU is lost"``); anything else gets its
    type name in front so a binding bug is not mistaken for an NVML answer.
    """
    if type(exc).__name__.startswith("NVMLError"):
        try:
            return {"nvml_error": str(exc)}
        except Exception:  # str() of an unknown code calls into the library
            return {"nvml_error": f"NVML error code {getattr(exc, 'value', '?')}"}
    return {"nvml_error": f"{type(exc).__name__}: {exc}".strip()}


def is_error(value) -> bool:
    """True when ``value`` is an ``{"nvml_error": ...}`` placeholder."""
    return isinstance(value, dict) and "nvml_error" in value


def error_code(exc: BaseException):
    """The nvmlReturn_t value of an NVMLError (``exc.value``), or None for other exceptions."""
    return getattr(exc, "value", None) if type(exc).__name__.startswith("NVMLError") else None


def call(nv, name: str, *args, conv=None):
    """Call ``nv.<name>(*args)`` and return its value (through ``conv``) or an ``nvml_error`` placeholder.

    ``nv`` is the pynvml module. A function this pynvml does not have is reported, not raised.
    """
    fn = getattr(nv, name, None)
    if fn is None:
        return {"nvml_error": f"pynvml has no {name}"}
    try:
        value = fn(*args)
        return conv(value) if conv is not None else value
    except Exception as e:  # NVMLError, NVMLLibraryMismatchError, ctypes errors
        return nvml_error(e)


def text(value) -> str:
    """Decode bytes (older pynvml returns bytes for char arrays) and strip NULs."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00")
