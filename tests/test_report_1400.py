"""report.html at 1400 px, as an operator opens it in the morning (headless Chromium, a real render): the
page never scrolls sideways, a wide table scrolls inside its own box with its first column fixed, colour only
for failures and stand-outs, each cause once, long paths shortened, the all-reduce floor drawn only at the
size it applies to.

Three replayed 2xH200 hosts (tests/data/replay-h200x2): one healthy, one with GPU 1's HBM read 12 % under its
floor (FAIL), one whose capture folder lacks the NVLink documents (ERROR naming the folder, a long path)."""
from __future__ import annotations

import re
import shutil

from project_helpers import DATA, GPU_LAYERS, alter, chromium, make_project, replay_folder, run_pytest

import subprocess

#: appended to a copy of report.html: what a person would see cut off at this width, written into the DOM
CHECK = """<script>
const vw = document.documentElement.clientWidth, bad = [];
if (document.documentElement.scrollWidth > vw) bad.push("page " + document.documentElement.scrollWidth);
for (const t of document.querySelectorAll("table")) {
  const box = t.parentElement;
  if (!box.classList.contains("scroll")) bad.push("table " + t.id + " not in a scroll box");
  if (box.getBoundingClientRect().right > vw + 1) bad.push("box of " + t.id + " past the edge");
}
for (const el of document.querySelectorAll("h1, h2, p, li, .plot")) {
  if (el.getBoundingClientRect().right > vw + 1) bad.push(el.tagName + " past the edge");
}
const inner = [...document.querySelectorAll(".scroll")].filter(b => b.scrollWidth > b.clientWidth)
  .map(b => b.firstElementChild.id);
const first = document.querySelector("#gpus td");
document.body.dataset.cut = bad.join("|") || "none";
document.body.dataset.innerScroll = inner.join(",");
document.body.dataset.sticky = first ? getComputedStyle(first).position : "";
document.body.dataset.hostsTop = Math.round(document.querySelector("#hosts").getBoundingClientRect().top);
document.body.dataset.failingTop = Math.round((document.querySelector("#failing-gpus") || document.body)
  .getBoundingClientRect().top);
</script>"""


def _slow_read(doc):
    doc["gpus"][1]["read_gbps"] = doc["gpus"][1]["read_gbps"] * 0.88


def test_report_at_1400_px_is_read_without_sideways_scrolling(tmp_path):
    inv = make_project(tmp_path, [], None, extra_suite="", name="test_zz_empty.py")
    no_nvlink = tmp_path / "no-nvlink"
    shutil.copytree(DATA, no_nvlink)
    for f in no_nvlink.glob("nvlink-*.json"):
        f.unlink()
    lines = [("h200-a", replay_folder(tmp_path, DATA)), ("h200-b", replay_folder(tmp_path, alter(tmp_path, "hbm_bandwidth", _slow_read))),
             ("h200-c", replay_folder(tmp_path, no_nvlink))]
    inv.write_text("".join(f"{h} ansible_connection=local gpuaccept_replay={d} gpu_sku=h200-sxm-141gb gpus_per_node=2\n"
                           for h, d in lines))
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", GPU_LAYERS)
    assert res.returncode == 1, res.stdout[-3000:]
    page = (rep / "report.html").read_text()
    # each cause once, paths shortened, colour only where it is needed
    assert str(no_nvlink) not in page and "…/" in page
    row_c = re.search(r'data-host="h200-c".*?</tr>', page, re.S).group(0)
    reasons = re.search(r'<td class="why">(.*?)</td>', row_c, re.S).group(1).split("; ")
    assert len(reasons) == len(set(reasons)) and row_c.count("nvlink: no saved document for arguments {} ") == 1
    assert "#bbf7d0" not in page  # no green cells for healthy figures
    colours = re.findall(r'style="background: (#[0-9a-f]+)"', page)
    assert colours and set(colours) <= {"#f4b4ae", "#fde68a"}
    # the floor is a mark at the judged size (4 GiB), not a line across every size
    assert "floor" in page and "at 4 GiB" in page
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", CHECK + "</body>"))
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,900"]
    shot = tmp_path / "report-1400.png"
    subprocess.run(base + [f"--screenshot={shot}", checked.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10000
    dom = subprocess.run(base + ["--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120).stdout
    got = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<body[^>]*>", dom).group(0)))
    assert got["cut"] == "none", got
    assert "gpus" in got["inner-scroll"].split(","), got  # the wide table scrolls inside its box
    assert got["sticky"] == "sticky", got
    assert int(got["hosts-top"]) < 300 and int(got["failing-top"]) < 900, got  # verdicts and failing GPUs above the fold
    assert not re.search(r"(?:/[\w.-]+){3,}", re.sub(r"<[^>]+>", " ", row_c)), row_c  # no long path in a reason
