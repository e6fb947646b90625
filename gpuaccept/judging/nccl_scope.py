"""Where an NCCL variable matters, and which variables an all-reduce ran with (pure; the table is data).

* **Scope** (:func:`scope`, :func:`in_scope`): each variable that switches a transport off, forces an algorithm or
  changes NCCL's channels (:data:`gpuaccept.judging.drift.NCCL_DRIFT_VARS`) needs some feature of the node's shape
  to change anything: NVLS needs an NVSwitch fabric, P2P and SHM two GPUs, IB and GPUDirect RDMA an RDMA NIC, the
  tuning variables a second rank. The table, with its source (NVIDIA's NCCL user guide, "Environment
  Variables"), is ``gpuaccept/data/nccl_scope.yaml``. A variable set outside the inventory on a node whose shape
  gives it no meaning is a note (recorded, never a failure); where it applies it stays a configuration failure.
* **What the ranks ran with** (:func:`seen_variables`): every variable of the table the probe saw (NCCL's ENV lines,
  ``nccl_env_seen``, and the workers' environment, ``worker_env``), with where it was set: ``inventory nccl_env``
  (the host's ``nccl_env``, handed to the probe), ``environment`` (the node's), or the NCCL configuration file
  the ``nccl_env`` probe found it in (``/etc/nccl.conf``, ``~/.nccl.conf`` or ``NCCL_CONF_FILE``: NCCL reads those
  only for a variable the environment lacks). Every all-reduce failure names them (:func:`named`).
* **A variable that explains a failure** (:func:`explaining`): channels that do not use the expected transport
  while a variable switching that transport off was set: the cause is configuration
  (:func:`transport_cause`, kind ``nccl_env_transport``), its action fix-config naming the variable, never a
  GPU reset. Wrong elements are never explained by a transport variable: they stay hardware.
"""
from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Mapping

from gpuaccept.causes import Cause
from gpuaccept.config.yamlload import load_data
from gpuaccept.judging.drift import NCCL_DRIFT_VARS
from gpuaccept.judging.health import Finding

DATA_FILE = "nccl_scope.yaml"
FEATURES = ("multi_gpu", "nvlink", "nvswitch", "rdma_nic", "multi_node")
CLASSES = ("transport", "tuning")
#: the cause kind of a failure a variable explains (its row: gpuaccept/data/actions.yaml, section causes)
KIND = "nccl_env_transport"
#: where NCCL read a variable the workers' environment did not carry (NCCL src/misc/param.cc, initEnvFunc)
CONF_FILES = "an NCCL config file (NCCL_CONF_FILE, ~/.nccl.conf or /etc/nccl.conf)"


@lru_cache(maxsize=None)
def load_scope() -> dict:
    """``gpuaccept/data/nccl_scope.yaml`` as read, its ``when`` patterns compiled; raises ValueError for a row with
    an unknown class or feature, no ``needs``, a ``disables`` without ``when``, or no ``why``."""
    with resources.files("gpuaccept").joinpath("data", DATA_FILE).open(encoding="utf-8") as f:
        table = load_data(f)
    out = {}
    for name, row in (table.get("variables") or {}).items():
        needs = row.get("needs")
        if row.get("class") not in CLASSES or not needs or not row.get("why"):
            raise ValueError(f"{DATA_FILE}: {name}: needs a class of {CLASSES}, needs and why")
        alts = [tuple(str(a).split("+")) for a in needs]
        bad = sorted({p for alt in alts for p in alt} - set(FEATURES))
        if bad:
            raise ValueError(f"{DATA_FILE}: {name}: unknown feature(s) {bad}; known: {FEATURES}")
        if row.get("disables") and not row.get("when"):
            raise ValueError(f"{DATA_FILE}: {name}: disables needs a when pattern")
        out[name] = {**row, "needs": alts, "disables": [str(d).upper() for d in row.get("disables") or []],
                     "when": re.compile(row["when"], re.I) if row.get("when") else None}
    return {"source": table.get("source"), "variables": out}


class Features:
    """The node's features (:data:`FEATURES`): ``shape`` a :class:`gpuaccept.judging.shape.Shape` (None: not known,
    every feature present); ``hosts``: hosts selected in the run (None: not known); ``rdma``: called at most once,
    when a variable needs it: True/False for an InfiniBand/RoCE device on the node, None when it cannot tell."""

    def __init__(self, shape=None, hosts: int | None = None, rdma: Callable[[], bool | None] | None = None):
        self.shape = shape
        self.hosts = hosts
        self._rdma = rdma
        self._memo: dict[str, bool | None] = {}

    def get(self, name: str) -> bool | None:
        """True, False, or None (could not be read)."""
        if name not in self._memo:
            self._memo[name] = self._read(name)
        return self._memo[name]

    def _read(self, name: str) -> bool | None:
        s = self.shape
        if name == "multi_node":
            return None if self.hosts is None else self.hosts > 1
        if name == "rdma_nic":
            return self._rdma() if self._rdma is not None else None
        if s is None:
            return None
        if name == "multi_gpu":
            return s.gpus >= 2
        if name == "nvlink":
            return s.gpus >= 2 and s.has_nvlink
        if name == "nvswitch":
            return s.has_fabric
        raise KeyError(name)

    def lacking(self, name: str) -> str:
        """What the node lacks, in words: ``"1 GPU"``, ``"no NVSwitch fabric"``..."""
        return {"multi_gpu": f"{self.shape.gpus if self.shape else '?'} GPU", "nvlink": "no NVLink between GPUs",
                "nvswitch": "no NVSwitch fabric", "rdma_nic": "no InfiniBand/RoCE device",
                "multi_node": "one host selected"}[name]


def scope(name: str, features: Features) -> tuple[bool, str]:
    """``(applies, why not)`` of NCCL variable ``name`` on a node with ``features``: it applies when one of its
    ``needs`` alternatives is met, or cannot be ruled out (a feature not read counts as present); a variable the
    table does not list applies. ``why not``: ``"NVLink SHARP: needs an NVSwitch fabric (NVLink multicast); this
    node: no NVSwitch fabric"`` when it does not apply, else ``""``."""
    row = load_scope()["variables"].get(name)
    if row is None:
        return True, ""
    lacking: list[str] = []
    for alt in row["needs"]:
        values = [features.get(f) for f in alt]
        if all(v is not False for v in values):
            return True, ""
        lacking += [f for f, v in zip(alt, values) if v is False and f not in lacking]
    return False, f"{row['why']}; this node: {', '.join(features.lacking(f) for f in lacking)}"


def in_scope(findings: list[Finding], features: Features, shape_text: str = "") -> tuple[list[Finding], list[str]]:
    """The findings of :func:`gpuaccept.judging.drift.nccl_env` with each failing ``nccl_env NAME`` whose variable
    does not apply to the node (:func:`scope`) turned into a note (recorded, ``extra.note`` and
    ``extra.not_applicable``), and the notes' lines for the test's output. ``shape_text``: the shape judged
    (:meth:`gpuaccept.judging.shape.Shape.describe`), said in each note."""
    out, notes = [], []
    for f in findings:
        name = f.check.split(" ", 1)[1] if f.check.startswith("nccl_env ") else None
        applies, why = scope(name, features) if f.failure and name else (True, "")
        if applies:
            out.append(f)
            continue
        src = (f.extra or {}).get("from", "?")
        note = f"not applicable to this node's shape ({shape_text}): {why}" if shape_text else \
            f"not applicable to this node: {why}"
        out.append(replace(f, failure=None, extra={**(f.extra or {}), "note": note, "not_applicable": True,
                                                   "would_fail": f.failure}))
        notes.append(f"{name}={f.value} from {src}: {note}")
    return out, notes


# ---------------------------------------------------------------------------------------------------------
# the variables an all-reduce ran with

def _conf_source(entry: Mapping[str, Any] | None) -> str | None:
    """Where the ``nccl_env`` probe found a variable, for a file (its path, else the source's name); None for
    the environment or nothing."""
    if not entry or entry.get("source") in (None, "environment", "login shell", "profile file"):
        return None
    return str(entry.get("path") or entry.get("source"))


def seen_variables(doc: Mapping | None, host_env: Mapping[str, str] | None = None,
                   pin: Mapping[str, str] | None = None, env_doc: Mapping | None = None) -> list[dict]:
    """``[{"name", "value", "from"}]``, by name, for every variable of the scope table the all-reduce ran with
    (pure). ``doc``: the ``nccl_allreduce`` document (``nccl_env_seen``: what NCCL says it read;
    ``worker_env``: what the workers were given), or None when the probe left none (then the node's variables as
    the ``nccl_env`` probe found them, ``env_doc``, and the inventory's); ``host_env``: the inventory's variables
    handed to the probe (:func:`gpuaccept.judging.multinode.nccl_environment`); ``pin``: gpuaccept's own (its
    ``NCCL_ALGO=Ring``: left out); ``env_doc``: the ``nccl_env`` document, which names the file a variable came
    from. ``from``: ``inventory nccl_env``, ``environment``, the file's path, or :data:`CONF_FILES`."""
    table = load_scope()["variables"]
    host_env = {str(k): str(v) for k, v in (host_env or {}).items()}
    pin = {str(k): str(v) for k, v in (pin or {}).items()}
    effective = (env_doc or {}).get("effective") or {}
    if doc is not None:
        said = {str(k): str(v) for k, v in (doc.get("nccl_env_seen") or {}).items()}
        given = {str(k): str(v) for k, v in (doc.get("worker_env") or {}).items()}
    else:
        given = {str(k): str((e or {}).get("value")) for k, e in effective.items()
                 if (e or {}).get("source") == "environment"}
        said = {**{str(k): str((e or {}).get("value")) for k, e in effective.items()}, **host_env}
        given.update(host_env)
    out = []
    for name in sorted((set(said) | set(given)) & set(table)):
        value = said.get(name, given.get(name))
        if name in pin and pin[name] == value and name not in host_env:
            continue
        if name in host_env and host_env[name] == value:
            where = "inventory nccl_env"
        elif name in given and given[name] == value:
            where = "environment"
        else:
            where = _conf_source(effective.get(name)) or CONF_FILES
        out.append({"name": name, "value": value, "from": where})
    return out


def variables_text(seen: list[dict]) -> str:
    """``"NCCL_P2P_DISABLE=1 (environment), NCCL_NVLS_ENABLE=0 (environment)"``."""
    return ", ".join(f"{v['name']}={v['value']} ({v['from']})" for v in seen)


def named(line: str, seen: list[dict]) -> str:
    """``line`` naming the variables seen: ``"...; NCCL variables set: NCCL_P2P_DISABLE=1 (environment)"``."""
    return f"{line}; NCCL variables set: {variables_text(seen)}" if seen else line


def explaining(seen: list[dict], expect: str | None) -> list[dict]:
    """The variables of ``seen`` whose value switches off a transport that ``expect`` (``"P2P"``,
    ``"NET/IB/GDRDMA"``...) names: a channel without the expected transport is then their doing."""
    if not expect:
        return []
    want = {p.upper() for p in str(expect).split("/") if p and p.upper() != "NET"}
    table = load_scope()["variables"]
    out = []
    for v in seen:
        row = table.get(v["name"]) or {}
        if want & set(row.get("disables") or []) and row["when"].match(str(v["value"]).strip()):
            out.append(v)
    return out


def transport_cause(var: dict, also: list[dict] | None = None) -> Cause:
    """The cause of a transport mismatch ``var`` explains: configuration, kind :data:`KIND`, evidence
    ``{name, value, from}`` (and ``also``: the other variables that explain it)."""
    ev = {"name": var["name"], "value": var["value"], "from": var["from"]}
    if also:
        ev["also"] = variables_text(also)
    return Cause("configuration", KIND, evidence=ev)


def explained(problem: str, var: dict) -> str:
    """The transport failure line with the variable that explains it: ``"NCCL channels use SHM/direct/direct where
    h200-sxm-141gb expects P2P: NCCL_P2P_DISABLE=1 (environment) disables the peer-to-peer (NVLink/PCIe)
    transport"``."""
    what = NCCL_DRIFT_VARS.get(var["name"], "changes NCCL's transports")
    return f"{problem}: {var['name']}={var['value']} ({var['from']}) {what}"
