"""Why a finding failed or could not be measured: the cause class, set where the fact is known, read by the actions.

Every failing or erroring finding carries a :class:`Cause`. Its ``cls`` is one of :data:`CLASSES`; the action
of the finding follows it (gpuaccept.judging.actions): ``drain-rma``, ``reset-gpu`` and ``reboot``
(:data:`HARDWARE_ACTIONS`) only with ``cls == "hardware"``.

==================  ===========================================================================================
``hardware``        a reading of the part (NVML, kernel log: Xid, ECC, row remap, link training, fabric, a lost
                    handle, SMART), or a figure below its floor confirmed under clean conditions on GPU and host
``configuration``   a package, interpreter, variable, mode, version, mount or setting of the node or inventory
``contention``      another process on the GPU or the host, another gpuaccept run holding the node
``capacity``        free space, memory: the node is full, not broken
``connectivity``    name resolution, SSH, authentication, a rendezvous address or port
``tool``            a probe that crashed, timed out or printed no document; a figure missing from a probe
``interruption``    the run itself was interrupted, or a test never ran
``unverified``      a figure outside its limit without the evidence that would make it hardware (taken once,
                    or with the conditions of the GPU or host unchecked): measure again
==================  ===========================================================================================

``kind`` is a stable key within the class (``name_unresolved``, ``package_missing``, ``host_busy``, ``blocked``,
``slow_figure``...): the action table (``gpuaccept/data/actions.yaml``, section ``causes``) is keyed by it.
``evidence`` is a small JSON-safe dict of what decided it (pids and shares, a reason code, free GiB, the
variables seen). The operator's words are made from these facts; nothing reads them back.

This module imports nothing of gpuaccept: every layer may use it (floor 0, beside ``errors``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLASSES = ("hardware", "configuration", "contention", "capacity", "connectivity", "tool", "interruption",
           "unverified")

#: actions that take a node or GPU out of service: only with hardware evidence
HARDWARE_ACTIONS = frozenset({"drain-rma", "reset-gpu", "reboot"})

#: user_properties key of a test's causes (a list of :meth:`Cause.to_dict`), beside gpuaccept.errors.ERROR_KEY
CAUSE_KEY = "gpuaccept.causes"


@dataclass(frozen=True)
class Cause:
    """One cause. ``cls``: one of :data:`CLASSES`; ``kind``: the key of its row in the action table's ``causes``
    section; ``host``: the host it is about (None: the test's own host); ``check``: a check or blocker name when the
    cause is one (``blocked`` by ``preflight``); ``gpu``: the NVML index it is about; ``evidence``: JSON-safe facts.
    Raises ValueError for a ``cls`` not in :data:`CLASSES`."""

    cls: str
    kind: str
    host: str | None = None
    check: str | None = None
    gpu: int | None = None
    evidence: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.cls not in CLASSES:
            raise ValueError(f"cause class {self.cls!r} is none of {CLASSES}")

    def to_dict(self) -> dict:
        """The JSON form: ``{"class", "kind"[, "host", "check", "gpu", "evidence"]}``, unset keys left out."""
        out: dict[str, Any] = {"class": self.cls, "kind": self.kind}
        for k in ("host", "check", "gpu"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.evidence:
            out["evidence"] = self.evidence
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Cause | None":
        """A cause from its JSON form; None for something that is not one (a record of another version)."""
        if not isinstance(d, dict) or d.get("class") not in CLASSES or not isinstance(d.get("kind"), str):
            return None
        ev = d.get("evidence") if isinstance(d.get("evidence"), dict) else {}
        gpu = d.get("gpu") if isinstance(d.get("gpu"), int) and not isinstance(d.get("gpu"), bool) else None
        return cls(d["class"], d["kind"], d.get("host") if isinstance(d.get("host"), str) else None,
                   d.get("check") if isinstance(d.get("check"), str) else None, gpu, ev)

    def on(self, host: str) -> "Cause":
        """This cause filed under ``host`` (unchanged when it already names one)."""
        if self.host is not None:
            return self
        return Cause(self.cls, self.kind, host, self.check, self.gpu, self.evidence)
