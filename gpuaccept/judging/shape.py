"""The node's shape: which part of the board its SKU file describes this node exposes, and so which
expectations apply. Pure functions of the gpu_inventory document (typed or raw) and the node's SkuSpec.

A SKU file describes a board (an HGX H200: 8 GPUs, 18 NVLinks each, NVSwitch fabric); a node may expose part
of it: one GPU of the eight given to a VM, NVLink disabled by the hypervisor, a passthrough GPU. What NVML
answers tells the two apart:

- NVLink: every link of a GPU answering "Not Supported" (nvmlDeviceGetNvLinkState; the gpu_inventory probe
  then writes ``nvlink_links`` as that error) means the node exposes no NVLink on that GPU; links that answer
  but are inactive are a fault of a node that has them (``0`` active links), judged by the nvlink layer.
- Fabric: ``NOT_SUPPORTED`` (nvmlGpuFabricState_t 0, NVML API reference, nvmlGpuFabricInfo_t) on a GPU with no
  NVLink is "no fabric on this node" (no NVSwitch reachable): recorded, with why, never a failure. Any other
  state than ``COMPLETED`` (``NOT_STARTED``, ``IN_PROGRESS``), or ``NOT_SUPPORTED`` on a GPU whose NVLinks
  are active, is a fabric present but not ready: a failure that blocks only the layers that need the fabric
  (:data:`FABRIC_LAYERS`), never HBM or TFLOP/s.
- GPU count: one GPU has no pair (no P2P, no intra-node all-reduce).

Measured 2026-12-01 on a one-GPU H200 SXM VM (driver 580.159.04): fabric state NOT_SUPPORTED, status Success,
every NVLink "Not Supported" (tests/data/replay-h200x1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.config.thresholds import SkuSpec
from gpuaccept.judging.readings import error_text, is_error, is_lost, number, present

#: layers whose figures need the NVSwitch fabric / NVLink (a fabric not ready blocks these, and only these)
FABRIC_LAYERS = frozenset({"nvlink", "nccl"})

#: fabric states (gpu_inventory's names of nvmlGpuFabricState_t) that say the fabric is ready
READY = "COMPLETED"
NO_FABRIC = "NOT_SUPPORTED"


@dataclass(frozen=True)
class Shape:
    """What the node exposes of its board.

    ``gpus``: GPUs NVML has a handle for; ``board``: the SKU's ``expect.gpus_per_node`` (None unknown);
    ``nvlink``: per NVML index, True (links answer), False (every link "Not Supported": none on this node);
    ``fabric``: per NVML index, "ready" | "none" (no fabric on this node) | "not ready" | "unreadable" |
    "not expected" (the SKU has no NVSwitch); ``name``: the SKU's short name ("H200 SXM")."""

    gpus: int
    board: int | None
    nvlink: dict = field(default_factory=dict)
    fabric: dict = field(default_factory=dict)
    name: str = "GPU"
    sku_nvlink: bool = False
    sku_nvswitch: bool = False

    @property
    def has_nvlink(self) -> bool:
        """True when some GPU of the node answers for its NVLinks (and the SKU has NVLink)."""
        return self.sku_nvlink and any(self.nvlink.values())

    @property
    def has_fabric(self) -> bool:
        """True when the SKU has an NVSwitch fabric and some GPU of the node is part of one (ready or not)."""
        return self.sku_nvswitch and any(v not in ("none", "not expected") for v in self.fabric.values())

    def not_applicable(self) -> dict[str, str]:
        """Layer -> why it does not apply to this shape (pure): ``nvlink`` without NVLink or with one GPU,
        ``nccl`` (the intra-node all-reduce) with one GPU."""
        out = {}
        if not self.sku_nvlink:
            out["nvlink"] = "the SKU has no NVLink"
        elif not self.has_nvlink:
            out["nvlink"] = "no NVLink on this node (NVML: Not Supported on every link)"
        elif self.gpus < 2:
            out["nvlink"] = "1 GPU: no NVLink peer"
        if self.gpus < 2:
            out["nccl"] = "1 GPU: nothing to reduce within the node"
        return out

    def describe(self) -> str:
        """``"1×H200 SXM (of 8 on the board), no NVLink, no fabric: nvlink and nccl layers not applicable"``."""
        parts = [f"{self.gpus}×{self.name}" + (f" (of {self.board} on the board)" if self.board and
                                                  self.board != self.gpus else "")]
        if self.sku_nvlink:
            parts.append("NVLink" if self.has_nvlink else "no NVLink")
        if self.sku_nvswitch:
            fab = set(self.fabric.values())
            parts.append("no fabric" if fab <= {"none"} else "fabric " + "/".join(sorted(fab)))
        na = self.not_applicable()
        tail = (f": {' and '.join(sorted(na))} layer{'s' if len(na) > 1 else ''} not applicable") if na else ""
        return ", ".join(parts) + tail


def gpu_nvlink(gpu: dict) -> bool:
    """True unless every NVLink of ``gpu`` answered "Not Supported" (``nvlink_links`` an NVML error whose
    text says so): the node exposes NVLink on it. A count (0 included) means the links answer."""
    v = gpu.get("nvlink_links")
    if is_error(v):
        return "not supported" not in (error_text(v) or "").lower()
    return True


def gpu_fabric(gpu: dict, sku: SkuSpec | None) -> tuple[str, str]:
    """``(state, why)`` of one GPU's fabric for its SKU (see :class:`Shape` ``fabric``); ``why`` one line."""
    if sku is not None and not sku.expect.get("nvswitch"):
        return "not expected", f"{sku.sku}: no NVSwitch fabric"
    fab = gpu.get("fabric")
    if not isinstance(fab, dict) or is_error(fab):
        return "unreadable", f"fabric unreadable ({fab})"
    state, status = str(fab.get("state")), str(fab.get("status"))
    if state.upper() == READY and status.lower() in ("none", "success"):
        return "ready", f"fabric state {state}, status {status}"
    if state.upper() == NO_FABRIC and not gpu_nvlink(gpu):
        return "none", (f"no fabric on this node: NVML fabric state {state} and no NVLink (Not Supported on "
                        f"every link): no NVSwitch reachable from this GPU (one GPU of the board, a VM or "
                        f"passthrough)")
    if state.upper() == NO_FABRIC:
        return "not ready", (f"fabric state {state}, status {status}, but this GPU's NVLinks answer: the "
                             f"fabric is not registered (Fabric Manager not running?)")
    return "not ready", f"fabric state {state}, status {status}"


def sku_short(sku: SkuSpec | None) -> str:
    """``"H200 SXM"`` from the SKU's ``name`` ("NVIDIA H200 SXM 141GB"): the vendor and memory size left out."""
    if sku is None:
        return "GPU"
    words = [w for w in str(getattr(sku, "name", "") or sku.sku).split() if w.upper() != "NVIDIA"
             and not w.upper().endswith("GB")]
    return " ".join(words) or sku.sku


def node_shape(doc: dict, sku: SkuSpec | None) -> Shape:
    """The :class:`Shape` of a node from its gpu_inventory document (raw or typed) and SkuSpec (None: not
    known; nothing is then expected of NVLink or the fabric). Lost GPUs do not count. Pure."""
    gpus = present(list(doc.get("gpus") or [])) if doc and doc.get("nvml_available") else []
    expect = sku.expect if sku is not None else {}
    board = expect.get("gpus_per_node")
    return Shape(gpus=len(gpus), board=int(board) if number(board) is not None else None,
                 nvlink={g.get("index"): gpu_nvlink(g) for g in gpus},
                 fabric={g.get("index"): gpu_fabric(g, sku)[0] for g in gpus},
                 name=sku_short(sku), sku_nvlink=bool(expect.get("nvlink_links")),
                 sku_nvswitch=bool(expect.get("nvswitch")))


def fabric_expected(gpu: dict, sku: SkuSpec | None) -> bool:
    """True when this GPU's fabric is judged (the SKU has NVSwitch and the node's shape has a fabric on it)."""
    return not is_lost(gpu) and gpu_fabric(gpu, sku)[0] not in ("none", "not expected")
