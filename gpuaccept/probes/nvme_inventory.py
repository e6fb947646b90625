"""NVMe inventory: controllers, namespaces, PCIe link of each controller, SMART health.

Args (JSON object, every key optional)::

    {"sysfs": "/sys",          # sysfs root (tests point it at a copy of the tree)
     "nvme_cli": true,         # use `nvme list -o json` and `nvme smart-log -o json` when nvme-cli exists
     "dev": "/dev"}            # where the controllers' character devices are (for smart-log)

Output::

    {"namespace_count", "controller_count",
     "namespaces": [{"name": "nvme0n1", "controller": "nvme0", "size_bytes", "logical_block_size"}],
     "controllers": [{"name": "nvme0", "model", "serial", "firmware_rev", "transport", "pci_address",
                      "state": "live" | "resetting" | "connecting" | "deleting" | "dead" | ... | null,
                      "link": {"current_speed_gts", "current_width", "max_speed_gts", "max_width",
                               "current_speed", "max_speed", "degraded"} | null,
                      "smart": {"critical_warning", "media_errors", "percent_used", "temperature_k"} | null,
                      "smart_error"}],
     "nvme_cli": "<version line>" | null, "nvme_list": <`nvme list -o json` document> | null}

Sources: /sys/class/nvme/<ctrl>/{model,serial,firmware_rev,transport,address,state} (``state``: the driver's
controller state, Linux drivers/nvme/host/core.c nvme_sysfs_show_state); namespaces are the
block devices /sys/block/nvme*n* (``size`` in 512-byte sectors, ``queue/logical_block_size``), which
with native NVMe multipath are the subsystem's head devices; the hidden per-path ``nvmeXcYnZ`` devices
are not counted. PCIe link: /sys/bus/pci/devices/<addr>/{current,max}_link_{speed,width} of the
controller's PCI function (``device`` link of the controller); ``degraded`` when the current speed
(GT/s) or width (lanes) is below the maximum. SMART: ``nvme smart-log -o json /dev/<ctrl>`` (NVMe
base specification, SMART / Health Information log page 02h): critical_warning (bit field; 0 = none),
media_errors (unrecovered data integrity errors), percent_used (vendor estimate of life used, may
exceed 100). Without nvme-cli ``smart`` is null and ``smart_error`` says why.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from _probe import reject_unknown, run
from _sysfs import read_text

ARG_KEYS = {"sysfs", "nvme_cli", "dev"}
NS_RE = re.compile(r"^nvme(\d+)n(\d+)$")


def parse_speed(text: str | None) -> float | None:
    """GT/s from a sysfs link speed such as "16.0 GT/s PCIe" (None for "Unknown" or missing)."""
    m = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def parse_int(text: str | None) -> int | None:
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


def pci_link(pci_dir: str) -> dict | None:
    """Link state of one PCI function directory; None when it has no link files (not PCIe)."""
    cur_s, max_s = read_text(f"{pci_dir}/current_link_speed"), read_text(f"{pci_dir}/max_link_speed")
    cur_w, max_w = read_text(f"{pci_dir}/current_link_width"), read_text(f"{pci_dir}/max_link_width")
    if cur_s is None and cur_w is None:
        return None
    link = {"current_speed": cur_s, "max_speed": max_s, "current_speed_gts": parse_speed(cur_s),
            "max_speed_gts": parse_speed(max_s), "current_width": parse_int(cur_w), "max_width": parse_int(max_w)}
    slow = None not in (link["current_speed_gts"], link["max_speed_gts"]) and \
        link["current_speed_gts"] < link["max_speed_gts"]
    narrow = None not in (link["current_width"], link["max_width"]) and link["current_width"] < link["max_width"]
    link["degraded"] = bool(slow or narrow)
    return link


def _num(v) -> int | float | None:
    """A SMART field: nvme-cli prints numbers, sometimes as strings ("1,234"), sometimes as
    {"value": n, ...} objects (critical_warning in verbose output)."""
    if isinstance(v, dict):
        v = v.get("value", v.get("raw"))
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return float(v.replace(",", "").rstrip("%")) if "." in v else int(v.replace(",", "").rstrip("%"), 0)
        except ValueError:
            return None
    return None


def parse_smart(doc: dict) -> dict:
    """The health fields of an ``nvme smart-log -o json`` document (nvme-cli 1.x and 2.x names)."""
    return {"critical_warning": _num(doc.get("critical_warning")),
            "media_errors": _num(doc.get("media_errors")),
            "percent_used": _num(doc.get("percent_used", doc.get("percentage_used"))),
            "temperature_k": _num(doc.get("temperature"))}


def smart_log(nvme: str, dev: str) -> tuple[dict | None, str | None]:
    try:
        p = subprocess.run([nvme, "smart-log", "-o", "json", dev], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvme smart-log {dev}: {e}"
    if p.returncode != 0:
        return None, f"nvme smart-log {dev}: rc {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:200]}"
    try:
        return parse_smart(json.loads(p.stdout)), None
    except ValueError:
        return None, f"nvme smart-log {dev}: output is not JSON"


def inventory(sysfs: str = "/sys", nvme: str | None = None, dev: str = "/dev") -> dict:
    """The document described in the module docstring (``nvme``: nvme-cli path or None)."""
    namespaces = []
    block = f"{sysfs}/block"
    for name in sorted(os.listdir(block)) if os.path.isdir(block) else []:
        m = NS_RE.match(name)
        if not m:
            continue
        sectors = parse_int(read_text(f"{block}/{name}/size"))
        namespaces.append({"name": name, "controller": f"nvme{m.group(1)}",
                           "size_bytes": sectors * 512 if sectors is not None else None,
                           "logical_block_size": parse_int(read_text(f"{block}/{name}/queue/logical_block_size"))})
    controllers = []
    cls = f"{sysfs}/class/nvme"
    for name in sorted(os.listdir(cls), key=lambda n: (len(n), n)) if os.path.isdir(cls) else []:
        d = f"{cls}/{name}"
        c = {"name": name, "model": read_text(f"{d}/model"), "serial": read_text(f"{d}/serial"),
             "firmware_rev": read_text(f"{d}/firmware_rev"), "transport": read_text(f"{d}/transport"),
             "state": read_text(f"{d}/state"), "pci_address": None, "link": None, "smart": None, "smart_error": None}
        pci = os.path.realpath(f"{d}/device") if os.path.exists(f"{d}/device") else None
        if c["transport"] in (None, "pcie") and pci:
            c["pci_address"] = read_text(f"{d}/address") or os.path.basename(pci)
            c["link"] = pci_link(f"{sysfs}/bus/pci/devices/{c['pci_address']}") or pci_link(pci)
        if nvme:
            c["smart"], c["smart_error"] = smart_log(nvme, f"{dev}/{name}")
        else:
            c["smart_error"] = "nvme-cli not installed"
        controllers.append(c)
    doc = {"namespace_count": len(namespaces), "controller_count": len(controllers), "namespaces": namespaces,
           "controllers": controllers, "nvme_cli": None, "nvme_list": None}
    if nvme:
        v = subprocess.run([nvme, "version"], capture_output=True, text=True, timeout=30)
        doc["nvme_cli"] = (v.stdout.strip().splitlines() or [None])[0]
        p = subprocess.run([nvme, "list", "-o", "json"], capture_output=True, text=True, timeout=60)
        try:
            doc["nvme_list"] = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else None
        except ValueError:
            doc["nvme_list"] = None
    return doc


def main(a: dict) -> dict:
    reject_unknown(a, ARG_KEYS)
    nvme = shutil.which("nvme") if a.get("nvme_cli", True) else None
    return inventory(a.get("sysfs", "/sys"), nvme, a.get("dev", "/dev"))


if __name__ == "__main__":
    run(main)
