"""paramiko, imported once for the package, without importing Invoke until an ssh_config needs it.

paramiko.config imports Invoke at its top (``try: import invoke``) for one thing only: the ``Match exec`` rule of
an ssh_config file, which runs a command to decide whether a block applies. Invoke in turn imports asyncio and
unittest.mock: 70 ms of the controller's 0.5 s start (``python -X importtime``, paramiko 5.1 and Invoke 3.0 on
Python 3.11, 2026-12-05), paid by every run and every xdist worker whether or not any config says ``Match exec``.

:func:`import_paramiko` imports paramiko with Invoke held back and gives paramiko.config a stand-in that imports
the real Invoke the first time a ``Match exec`` rule is evaluated, so such a config reads exactly as before; an
Invoke that is not installed raises the same ImportError there as paramiko's own import would have. Where
paramiko or Invoke was imported already (by another plugin, say) nothing is changed.
"""
from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


class _InvokeOnUse:
    """Stands for the ``invoke`` module in paramiko.config: the first attribute asked for (``run``) imports the real
    Invoke, puts it in paramiko.config's place and answers from it."""

    def __getattr__(self, name: str):
        real = importlib.import_module("invoke")
        config = sys.modules.get("paramiko.config")
        if config is not None and getattr(config, "invoke", None) is self:
            config.invoke = real
        return getattr(real, name)


def import_paramiko() -> ModuleType:
    """The ``paramiko`` module, imported now if it was not (thread-safe). Raises ImportError where paramiko is not
    installed."""
    if "paramiko" in sys.modules:
        return sys.modules["paramiko"]
    with _LOCK:
        if "paramiko" in sys.modules:
            return sys.modules["paramiko"]
        held = "invoke" not in sys.modules
        if held:
            sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError now
        try:
            import paramiko
        finally:
            if held and sys.modules.get("invoke", False) is None:
                del sys.modules["invoke"]
        config = sys.modules.get("paramiko.config")
        if held and config is not None and getattr(config, "invoke", None) is None:
            config.invoke = _InvokeOnUse()
            config.invoke_import_error = None
        return paramiko
