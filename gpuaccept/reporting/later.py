"""A write due later (:class:`Later`): records that arrive with none after them still reach disk. The whole-run
report files (gpuaccept.reporting.reporter) and the history database's rows (gpuaccept.plugin.finish) each keep
one, so that a run held by a hung host and then killed leaves what had arrived."""
from __future__ import annotations

import threading
from typing import Callable


class Later:
    """At most one pending call of ``fn`` at a time, on a daemon timer thread named ``name`` (it never keeps a
    finished controller alive), made under ``lock``, the owner's lock over what ``fn`` writes; :meth:`stop`
    cancels the pending call and refuses new ones."""

    def __init__(self, fn: Callable[[], None], lock, name: str):
        self._fn, self._lock, self._name = fn, lock, name
        self._timer: threading.Timer | None = None
        self.stopped = False

    def arm(self, delay_s: float) -> None:
        """Call ``fn`` in ``delay_s`` seconds (0 at least), unless a call is pending or :meth:`stop` was called.
        The owner calls it holding its lock."""
        if self.stopped or self._timer is not None:
            return
        t = threading.Timer(max(0.0, delay_s), self._fire)
        t.daemon = True
        t.name = self._name
        self._timer = t
        t.start()

    @property
    def pending(self) -> bool:
        """Whether a call is armed and not yet made."""
        return self._timer is not None

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            if not self.stopped:
                self._fn()

    def stop(self) -> None:
        """No more calls; waits for one in progress (it holds the owner's lock)."""
        with self._lock:
            self.stopped = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
