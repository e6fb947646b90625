"""The storage and gpudirect layers: storage_limits (table-driven), the fio_throughput probe on real files
with real fio (tmpfs refused, free-space margin, a fio job error, cleanup after SIGTERM, the mount it
measured as findmnt sees it), the storage_mounts probe on real mounts made in a private mount namespace
(tmpfs, a bind mount of /, a mount point with a space), the storage -> GPU journey on CPU, the NVMe/RDMA
probes on sysfs- and proc-shaped trees (peer memory listed vs registered), and both suites end to end over
sshd nodes: paths on the OS disk, a host that sees another filesystem under a shared path.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpuaccept.judging import storage as sj
from gpuaccept.config import storage as sl
from gpuaccept.errors import ConfigError
from gpuaccept.reporting.folder import run_figures
from probe_helpers import sysfs_pci as _pci, write_line as _w
from project_helpers import fleet_test, junit, make_project, run_pytest

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "gpuaccept" / "probes"
MIB = 1 << 20
SMALL = {"size": 8 * MIB, "runtime": 1, "numjobs": 1, "iodepth": 4, "min_free_bytes": 64 * MIB}


def probe(name: str, args: dict, timeout: float = 120) -> tuple[dict, subprocess.CompletedProcess]:
    """Run a probe the way HostRunner.probe does (cwd = probes folder, JSON on the last stdout line)."""
    p = subprocess.run([sys.executable, f"{name}.py", json.dumps(args)], cwd=PROBES, capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return json.loads(p.stdout.strip().splitlines()[-1]), p


def leftovers(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.startswith(".gpuaccept-")]


def findmnt(path) -> dict:
    """util-linux findmnt's view of the mount holding ``path``: {"target", "source", "fstype", "maj:min"}
    (an independent reader of the same kernel table the probes parse)."""
    exe = shutil.which("findmnt")
    assert exe, "findmnt (util-linux) not on PATH"
    out = subprocess.run([exe, "-J", "-o", "TARGET,SOURCE,FSTYPE,MAJ:MIN", "--target", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["filesystems"][0]


def on_root_fs(path) -> bool:
    return findmnt(path)["maj:min"] == findmnt("/")["maj:min"]


def probe_in_namespace(name: str, args: dict, setup: str) -> dict:
    """Run a probe in a private mount namespace (``unshare --mount``, needs root) after the shell commands
    ``setup`` (e.g. mounting a tmpfs): the mounts exist for this probe only and vanish with it."""
    unshare = shutil.which("unshare")
    assert unshare and os.geteuid() == 0, "mount namespaces need util-linux unshare and root (as sshd tests do)"
    p = subprocess.run([unshare, "--mount", "--propagation", "private", "/bin/sh", "-c",
                        f'{setup} && exec "$0" "$1" "$2"', sys.executable, f"{name}.py", json.dumps(args)],
                       cwd=PROBES, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def root_fs_dir(tmp_path):
    """A fresh directory on the root filesystem (the OS disk): ``tmp_path`` when it is there, else a folder
    made in ``/`` and removed afterwards."""
    if on_root_fs(tmp_path):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(prefix="gpuaccept-test-", dir="/"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- storage_limits (pure) ------------------------------------------------------------------------------
LIMIT_CASES = [
    ("none", None, {}, None),
    ("empty", {}, {}, None),
    ("two", {"seq_read_gbps": 12, "rand_read_iops": 1.5e6}, {"seq_read_gbps": (12.0, "GB/s"),
                                                             "rand_read_iops": (1.5e6, "IOPS")}, None),
    ("aggregate", {"fs_aggregate_read_gbps": 80.5}, {"fs_aggregate_read_gbps": (80.5, "GB/s")}, None),
    ("typo", {"seq_raed_gbps": 1}, None, "unknown key 'seq_raed_gbps'"),
    ("not_mapping", [1, 2], None, "expected a mapping"),
    ("string_bound", {"seq_read_gbps": "fast"}, None, "seq_read_gbps: expected a number"),
    ("bool_bound", {"seq_write_gbps": True}, None, "expected a number"),
    ("negative", {"seq_write_gbps": -1}, None, "expected a number >= 0"),
]


@pytest.mark.parametrize("case,value,want,err", LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_storage_limits_table(case, value, want, err):
    if err:
        with pytest.raises(sl.StorageConfigError, match=err) as ei:
            sl.storage_limits(value, "gpu-07")
        assert isinstance(ei.value, ConfigError) and str(ei.value).startswith("gpu-07: inventory var storage_limits")
        return
    got = sl.storage_limits(value, "gpu-07")
    assert {k: (v.bound, v.unit) for k, v in got.items()} == want
    assert all(v.direction == "min" and v.source == "inventory var storage_limits" and v.check == k
               for k, v in got.items())


VAR_CASES = [
    (sl.path_list, ("/a", "storage_paths"), ["/a"]),
    (sl.path_list, (["/a", "/b"], "fs_paths"), ["/a", "/b"]),
    (sl.path_list, (None, "fs_paths"), []),
    (sl.path_list, (["rel"], "fs_paths"), "not an absolute path"),
    (sl.path_list, ({"a": 1}, "fs_paths"), "expected a list"),
    (sl.bool_var, (None, "gds_allow_compat"), False),
    (sl.bool_var, ("yes", "gds_allow_compat"), True),
    (sl.bool_var, ("maybe", "gds_allow_compat"), "expected true or false"),
    (sl.int_var, (None, "nvme_count"), None),
    (sl.int_var, (8, "nvme_count"), 8),
    (sl.int_var, ("8", "nvme_count"), "expected an integer"),
    (sl.str_list, ("mlx5_0", "ib_hcas"), ["mlx5_0"]),
    (sl.str_list, (["mlx5_0", "mlx5_1"], "ib_hcas"), ["mlx5_0", "mlx5_1"]),
    (sl.str_list, ([""], "ib_hcas"), "expected a string or a list of strings"),
    (sl.str_list, (3, "fs_expect_fstype"), "expected a string or a list of strings"),
    (sl.fio_args, ({"size": 1024, "runtime": 1},), {"size": 1024, "runtime": 1}),
    (sl.fio_args, ({"sise": 1024},), "unknown key 'sise'"),
]


@pytest.mark.parametrize("fn,args,want", VAR_CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(VAR_CASES)])
def test_storage_vars_table(fn, args, want):
    if isinstance(want, str):  # every function returns a non-str on success: a str is the expected error
        with pytest.raises(sl.StorageConfigError, match=want):
            fn(*args)
    else:
        assert fn(*args) == want


# -- fio_throughput on real files ----------------------------------------------------------------------
def test_fio_measures_and_cleans_up(tmp_path):
    """Sequential read/write GB/s and random-read IOPS on an ext4 (or other block-backed) tmp dir."""
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)]})
    assert p.returncode == 0, p.stderr[-2000:]
    r = doc["paths"][0]
    assert r["ok"] and r["error"] is None, r
    assert r["seq_read_gbps"] > 0 and r["seq_write_gbps"] > 0 and r["rand_read_iops"] > 0
    assert r["tests"]["seq_read"]["command"][1] == "--output-format=json"
    assert r["fstype"] not in ("tmpfs", "overlay") and r["total_bytes"] == 8 * MIB
    assert isinstance(r["fio_messages"], list)
    assert leftovers(tmp_path) == []


def test_fio_not_on_the_nodes_path_is_the_nodes_software_not_a_crash(tmp_path):
    """fio missing on the node (the lent GPU machine has none): the probe's failure document names the program, the
    controller reads it as the node's configuration (install fio: fix-config), never a crash to rerun."""
    from gpuaccept.errors import ProgramMissing
    from gpuaccept.judging import actions
    from gpuaccept.runner.parse import probe_error
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "fio": "no-such-fio"})
    assert p.returncode == 1 and doc["failed"] and doc["missing_program"] == "no-such-fio", doc
    err = probe_error("node-1", f"fio_throughput: {doc['msg']}", sys.executable, doc.get("missing_module"),
                      doc.get("missing_program"))
    assert isinstance(err, ProgramMissing) and (err.cause.cls, err.cause.kind) == ("configuration", "program_missing")
    act = actions.for_cause(err.cause)
    assert act.action == "fix-config" and "install no-such-fio" in act.command, act
    assert leftovers(tmp_path) == []


def test_fio_without_its_io_engine_is_the_nodes_software_not_a_crash(tmp_path):
    """Real fio asked for an I/O engine it cannot load (as fio without libaio's library): the probe names the
    engine, the judge reads configuration (install the library), not a tool failure to rerun."""
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "ioengine": "nosuchengine"})
    (r,) = doc["paths"]
    assert r["failure"]["reason"] == "fio_engine_missing" and r["failure"]["engine"] == "nosuchengine", r
    outcome, cause = sj.path_cause(r)
    assert (outcome, cause.cls, cause.kind, cause.evidence["engine"]) == \
        ("error", "configuration", "fio_engine_missing", "nosuchengine")
    assert leftovers(tmp_path) == []


def _fio_probe():
    """The fio_throughput probe module, imported as on a node (its folder on sys.path only for the import)."""
    sys.path.insert(0, str(PROBES))
    try:
        import fio_throughput
    finally:
        sys.path.remove(str(PROBES))
    return fio_throughput


def test_summarize_units_on_real_fio_output(tmp_path):
    """fio_throughput.summarize on a document real fio wrote: GB/s is bw_bytes / 1e9, µs is lat_ns / 1e3,
    runtime in ms, summed over jobs (two jobs without group reporting here)."""
    ft = _fio_probe()
    cmd = ft.fio_command(shutil.which("fio"), "seq_write", str(tmp_path), None, bs="1M", size=4 * MIB, runtime=0.5,
                         numjobs=2, iodepth=1, ioengine="psync", direct=0)
    cmd.remove("--group_reporting")
    doc, msgs, rc = ft.run_fio(cmd, timeout=120)
    assert rc == 0 and doc is not None, msgs
    jobs = [j["write"] for j in doc["jobs"]]
    assert len(jobs) == 2
    got = ft.summarize(doc, "write")
    assert got["gbps"] == round(sum(j["bw_bytes"] for j in jobs) / 1e9, 4) and got["gbps"] > 0
    assert got["iops"] == round(sum(j["iops"] for j in jobs), 1)
    assert got["io_bytes"] == sum(j["io_bytes"] for j in jobs)
    assert got["runtime_ms"] == max(j["runtime"] for j in jobs)
    assert got["lat_mean_us"] == round(max(j["lat_ns"]["mean"] for j in jobs) / 1e3, 2)
    assert ft.summarize(doc, "read")["gbps"] == 0.0  # a direction the jobs did not run counts as 0


def test_a_runs_start_is_its_timed_part_not_fios_launch(tmp_path):
    """What the shared-filesystem aggregate compares between hosts is when each host's timed fio run began: real
    fio laying out a 64 MiB file before a 1 s read starts its timed part after that, which fio's report time
    less the run's runtime gives; the launch time counted the layout (and a slow start) as a run apart."""
    ft = _fio_probe()
    cmd = ft.fio_command(shutil.which("fio"), "seq_read", str(tmp_path), None, bs="1M", size=64 * MIB, runtime=1,
                         numjobs=1, iodepth=1, ioengine="psync", direct=0)
    launched = time.time()
    doc, msgs, rc = ft.run_fio(cmd, timeout=120)
    ended = time.time()
    assert rc == 0 and doc is not None, msgs
    fig = ft.summarize(doc, "read")
    start = ft.timed_start(doc, fig, launched)
    assert launched <= start <= ended - fig["runtime_ms"] / 1e3 + 0.05
    assert start == pytest.approx(doc["timestamp_ms"] / 1e3 - fig["runtime_ms"] / 1e3)
    assert ft.timed_start({}, fig, launched) == launched  # an fio without timestamp_ms: the launch time
    assert ft.timed_start({"timestamp_ms": 1000}, fig, launched) == launched  # never before the launch


def test_fractional_runtime_is_run_whole(tmp_path):
    """storage_fio.runtime 1.5 (the inventory accepts a float): fio read a bare "1.5" as 1 s and "0.5" as 0 s
    (a 6 ms time-based run, its GB/s a figure of nothing). Each test now runs the asked 1.5 s, on real fio."""
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "runtime": 1.5, "tests": ["seq_read"]})
    r = doc["paths"][0]
    assert r["ok"], r
    assert 1500 <= r["tests"]["seq_read"]["runtime_ms"] < 2500, r["tests"]["seq_read"]
    assert "--runtime=1500ms" in r["tests"]["seq_read"]["command"]


def test_summarize_reads_older_fio_json(tmp_path):
    """A document real fio wrote, ALTERED as older fio writes it: without ``bw_bytes`` (added in fio 3.2; Ubuntu
    18.04's fio 3.1 has only ``bw`` in KiB/s) and without ``lat_ns`` (fio < 3.0: ``lat`` in µs). The GB/s is
    read from ``bw`` * 1024 (before: 0.0 GB/s, a healthy drive failing its floor or recorded as 0); with
    neither field no figure is made up (None)."""
    ft = _fio_probe()
    cmd = ft.fio_command(shutil.which("fio"), "seq_write", str(tmp_path), None, bs="1M", size=4 * MIB, runtime=0.5,
                         numjobs=1, iodepth=1, ioengine="psync", direct=0)
    doc, msgs, rc = ft.run_fio(cmd, timeout=120)
    assert rc == 0 and doc is not None, msgs
    new = ft.summarize(doc, "write")
    old = json.loads(json.dumps(doc))
    for j in old["jobs"]:
        for d in ("read", "write", "trim"):
            j[d].pop("bw_bytes", None)
            lat = j[d].pop("lat_ns")
            j[d]["lat"] = {k: v / 1e3 for k, v in lat.items() if isinstance(v, (int, float))}
    got = ft.summarize(old, "write")
    assert new["gbps"] > 0 and got["gbps"] == pytest.approx(new["gbps"], abs=2e-4), (got, new)
    assert got["lat_mean_us"] == pytest.approx(new["lat_mean_us"], abs=0.01)
    for j in old["jobs"]:
        j["write"].pop("bw")
    assert ft.summarize(old, "write")["gbps"] is None


@pytest.fixture
def tmpfs_dir(tmp_path):
    """A tmpfs mount (mount -t tmpfs, as root), else /dev/shm when mounting is not permitted."""
    d = tmp_path / "ram"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(d)], capture_output=True).returncode == 0:
        yield d
        subprocess.run(["umount", str(d)], capture_output=True)
    else:
        assert " /dev/shm " in Path("/proc/self/mountinfo").read_text() and "tmpfs" in Path("/proc/self/mountinfo").read_text()
        yield Path("/dev/shm")


def test_tmpfs_rejected_before_any_write(tmpfs_dir):
    doc, _ = probe("fio_throughput", {**SMALL, "paths": [str(tmpfs_dir)]})
    r = doc["paths"][0]
    assert not r["ok"] and r["error"] == f"{tmpfs_dir}: not a block-backed filesystem (tmpfs)"
    assert r["tests"] == {} and r["seq_read_gbps"] is None
    assert leftovers(tmpfs_dir) == []


def test_fio_reports_where_the_path_is(tmp_path):
    """fio_throughput names the mount it measured, as findmnt sees it, and whether it is the OS disk."""
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "tests": ["seq_read"]})
    assert p.returncode == 0, p.stderr[-2000:]
    r, fm = doc["paths"][0], findmnt(tmp_path)
    assert (r["mount_point"], r["mount_source"], r["fstype"], r["device"]) == \
        (fm["target"], fm["source"], fm["fstype"], fm["maj:min"])
    assert r["root_fs"] is on_root_fs(tmp_path)


def test_storage_mounts_probe_on_real_mounts(tmp_path):
    """The storage_mounts probe on a plain folder, a tmpfs, a tmpfs whose mount point has a space (mountinfo
    writes it as \\040), a bind mount of / (a mount point of its own, still the OS disk) and a missing folder."""
    plain, ram, spaced, bind = (tmp_path / n for n in ("plain", "ram", "with space", "bind"))
    for d in (plain, ram, spaced, bind):
        d.mkdir()
    setup = (f"mount -t tmpfs -o size=1m gpuaccept-ram '{ram}' && mount -t tmpfs -o size=1m spaced '{spaced}' "
             f"&& mount --bind / '{bind}'")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "unmounted" / "scratch")
    paths = [str(plain), str(ram), str(spaced), str(bind), str(tmp_path / "missing"), str(tmp_path / "afile"),
             str(tmp_path / "dangling")]
    doc = probe_in_namespace("storage_mounts", {"paths": paths}, setup)
    got = {Path(e["path"]).name: e for e in doc["paths"]}
    fm = findmnt(plain)
    assert (got["plain"]["mount_point"], got["plain"]["fstype"], got["plain"]["root_fs"]) == \
        (fm["target"], fm["fstype"], on_root_fs(plain))
    assert (got["ram"]["mount_point"], got["ram"]["mount_source"], got["ram"]["fstype"], got["ram"]["root_fs"]) == \
        (str(ram), "gpuaccept-ram", "tmpfs", False)
    assert got["with space"]["mount_point"] == str(spaced) and got["with space"]["fstype"] == "tmpfs"
    assert (got["bind"]["mount_point"], got["bind"]["root_fs"], got["bind"]["device"]) == \
        (str(bind), True, findmnt("/")["maj:min"])
    assert got["missing"]["error"] == f"{tmp_path / 'missing'}: no such directory"
    assert got["missing"]["mount_point"] is None
    # the same folders judged as storage_paths: the bind of / is the OS disk however it is mounted
    problems = {k: sj.placement_problems(e, sl.expectation({}, "storage")) for k, e in got.items()}
    # a RAM disk where a drive was meant fails before fio (the probe would refuse it too), naming the mount
    assert problems["ram"] == [f"storage_paths {ram} is on tmpfs gpuaccept-ram mounted at {ram}: a RAM, overlay or "
                               "FUSE filesystem, not a drive (the drive's mount meant for it is missing?)"]
    assert len(problems["with space"]) == 1 and f"mounted at {spaced}: a RAM" in problems["with space"][0]
    assert [sj.placement_problems(got[k], sl.expectation({"storage_expect_fstype": "tmpfs"}, "storage"))
            for k in ("ram", "with space")] == [[], []]
    assert len(problems["bind"]) == 1 and "is on the root filesystem" in problems["bind"][0]
    assert problems["missing"] == [f"{tmp_path / 'missing'}: no such directory"]
    # a file, and a symlink to a folder on a mount that is not there: each named for what it is
    assert problems["afile"] == [f"{tmp_path / 'afile'}: not a directory but a regular file"]
    assert problems["dangling"] == [f"{tmp_path / 'dangling'}: a symlink to {tmp_path / 'unmounted' / 'scratch'}, "
                                    "which does not exist (is its mount missing?)"]


def test_mount_missing_on_one_host_from_real_placements(root_fs_dir):
    """The field case judged on real probe output: two hosts see the shared filesystem (a tmpfs standing in
    for Lustre) at the path, on the third the mount is missing and the folder sits on the OS disk."""
    shared = root_fs_dir / "lustre"
    shared.mkdir()
    mounted = probe_in_namespace("storage_mounts", {"paths": [str(shared)]},
                                 f"mount -t tmpfs -o size=1m 10.0.0.1@o2ib:/fs '{shared}'")["paths"][0]
    missing, _ = probe("storage_mounts", {"paths": [str(shared)]})
    placements = {"gpu01": mounted, "gpu02": mounted, "gpu03": missing["paths"][0]}
    split = sj.split_shared_fs(str(shared), placements, dict.fromkeys(placements, sl.expectation({}, "fs")))
    assert split.members == ("gpu01", "gpu02") and split.reference == ("tmpfs", "10.0.0.1@o2ib:/fs")
    assert list(split.problems) == ["gpu03"]
    assert split.problems["gpu03"][0].startswith(f"gpu03: fs_paths {shared} is on the root filesystem")


def test_free_space_margin_enforced(tmp_path):
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    doc, _ = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "min_free_bytes": free + (1 << 30)})
    r = doc["paths"][0]
    assert not r["ok"] and r["error"].startswith(f"not enough free space on {tmp_path}: ")
    # what was free, what was needed, and of what the need is made (the margin asked, the least worth writing)
    assert " free, " in r["error"] and " needed (a margin of " in r["error"] and "64 MiB at least to write" in r["error"]
    assert r["tests"] == {}
    assert leftovers(tmp_path) == []


def test_fio_job_error_becomes_errno(tmp_path):
    """ioengine sg on a regular file: fio prints messages, then JSON with the job's error 22 (EINVAL)."""
    doc, _ = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "ioengine": "sg", "tests": ["seq_read"]})
    r = doc["paths"][0]
    assert not r["ok"]
    assert f"errno 22 ({os.strerror(22)})" in r["error"] and "fio job seq_read" in r["error"]
    assert any("sg" in m for m in r["fio_messages"]), r["fio_messages"]
    assert leftovers(tmp_path) == []


def test_sigterm_mid_fio_removes_files(tmp_path):
    """The runner's timeout kill (TERM to the process group) mid-fio: the .gpuaccept-* folder is gone."""
    args = {**SMALL, "paths": [str(tmp_path)], "runtime": 60, "tests": ["seq_write"]}
    proc = subprocess.Popen([sys.executable, "fio_throughput.py", json.dumps(args)], cwd=PROBES,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            work = leftovers(tmp_path)
            if work and any(True for _ in (tmp_path / work[0]).glob("gpuaccept.*")):
                break
            time.sleep(0.1)
        else:
            pytest.fail("fio never started writing")
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert leftovers(tmp_path) == [], err[-2000:]
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["failed"] and "SIGTERM" in doc["msg"]
    assert proc.returncode == 1


def test_path_with_colon_space_and_shell_characters(tmp_path):
    """Directories whose names hold ':' (fio splits --directory and --filename on it), a space and shell
    metacharacters are measured where they are, and nothing is left behind. Before: the ':' path failed with
    fio's "fio: <path up to the colon> is not a directory" (a healthy disk failing)."""
    dirs = [tmp_path / "nvme0:scratch", tmp_path / "with space", tmp_path / "x$y;z`w'q\""]
    for d in dirs:
        d.mkdir()
    doc, p = probe("fio_throughput", {**SMALL, "paths": [str(d) for d in dirs], "tests": ["seq_write", "seq_read"]})
    for d, r in zip(dirs, doc["paths"]):
        assert r["path"] == str(d) and r["ok"] and r["error"] is None, r
        assert r["seq_read_gbps"] > 0 and r["seq_write_gbps"] > 0
        assert leftovers(d) == []
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(d.name for d in dirs)  # no file beside them


def _children(pid: int, comm: str, arg: str) -> list[int]:
    """Process ids whose parent is ``pid``, whose name is ``comm`` and whose command line has ``arg``."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            stat_ = (d / "stat").read_text()
        except OSError:
            continue
        name = stat_[stat_.index("(") + 1:stat_.rindex(")")]
        ppid = int(stat_[stat_.rindex(")") + 2:].split()[1])
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == pid and name == comm and arg.encode() in argv:
            out.append(int(d.name))
    return out


def test_fio_stopped_by_a_signal_is_not_a_measurement(tmp_path):
    """fio alone gets SIGTERM mid-run (an operator's kill, a job-control or OOM kill): fio still prints JSON
    with error 0 for the 1-2 s it ran and exits 128. The path fails naming the partial run and fio's own
    line; no figure is recorded. Before: ok with the partial run's GB/s."""
    args = {**SMALL, "paths": [str(tmp_path)], "runtime": 30, "tests": ["seq_read"]}
    proc = subprocess.Popen([sys.executable, "fio_throughput.py", json.dumps(args)], cwd=PROBES,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        fio = []
        while time.time() < deadline and not fio:
            fio = _children(proc.pid, "fio", "--name=seq_read")
            time.sleep(0.1)
        assert fio, "fio never started"
        time.sleep(1.5)
        os.kill(fio[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    r = json.loads(out.strip().splitlines()[-1])["paths"][0]
    assert not r["ok"] and r["seq_read_gbps"] is None and "seq_read" not in r["tests"], r
    assert "fio seq_read was stopped after" in r["error"] and "of 30 s (exit status 128)" in r["error"], r["error"]
    assert "fio: terminating on signal 15" in r["error"]
    assert leftovers(tmp_path) == []


def test_storage_to_gpu_cpu_path(tmp_path):
    doc, p = probe("storage_to_gpu", {"path": str(tmp_path), "device": "cpu", "bytes": 16 * MIB,
                                      "chunk_bytes": 4 * MIB, "min_free_bytes": 64 * MIB})
    assert p.returncode == 0, p.stderr[-2000:]
    assert doc["bytes"] == 16 * MIB and doc["storage_read_gbps"] > 0 and doc["host_copy_gbps"] > 0
    assert doc["end_to_end_gbps"] > 0 and doc["bounding_stage"] in ("storage_read", "host_copy")
    assert leftovers(tmp_path) == []


def test_storage_to_gpu_refuses_tmpfs(tmpfs_dir):
    doc, _ = probe("storage_to_gpu", {"path": str(tmpfs_dir), "device": "cpu", "bytes": MIB})
    assert doc["failed"] and "not a block-backed filesystem (tmpfs)" in doc["msg"]


def test_gds_detection_without_gpu():
    doc, p = probe("gds", {})
    assert p.returncode == 0, p.stderr[-2000:]
    assert doc["mode"] in ("nvidia-fs", "p2pdma", "compat") and doc["gpu"] is False and doc["reason"]
    assert isinstance(doc["cufile"]["paths"], list)


def test_probes_import_no_other_probe():
    """Probes share code only through the shipped ``_*.py`` helpers (``_storage`` for the storage scratch
    set-up), never by importing another measurement file."""
    import ast
    names = {f.stem for f in PROBES.glob("*.py")}
    bad = []
    for f in sorted(PROBES.glob("[!_]*.py")):
        for n in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module] if isinstance(n, ast.ImportFrom) and n.module and not n.level else []
            bad += [f"{f.name} imports {m}" for m in mods if m in names and not m.startswith("_")]
    assert bad == []
    storage = {f: (PROBES / f).read_text() for f in ("fio_throughput.py", "gds.py", "storage_to_gpu.py")}
    assert all("from _storage import" in text for text in storage.values())


# -- sysfs-shaped trees (real files laid out like the kernel's) -------------------------------------------
def test_nvme_inventory_sysfs_tree(tmp_path):
    sysfs = tmp_path / "sys"
    for i, (cur, width) in enumerate((("16.0 GT/s PCIe", "4"), ("8.0 GT/s PCIe", "4"))):
        bdf = f"0000:0{i + 1}:00.0"
        dev = _pci(sysfs, ["0000:00:01.0", bdf])
        _w(dev / "current_link_speed", cur)
        _w(dev / "current_link_width", width)
        _w(dev / "max_link_speed", "16.0 GT/s PCIe")
        _w(dev / "max_link_width", "4")
        c = sysfs / "class" / "nvme" / f"nvme{i}"
        c.mkdir(parents=True)
        (c / "device").symlink_to(dev)
        for k, val in (("model", "ACME NVMe"), ("serial", f"S{i}"), ("firmware_rev", "1.0"), ("transport", "pcie"),
                       ("address", bdf)):
            _w(c / k, val)
        _w(sysfs / "block" / f"nvme{i}n1" / "size", "2000000")
        _w(sysfs / "block" / f"nvme{i}n1" / "queue" / "logical_block_size", "4096")
    (sysfs / "block" / "nvme0c0n1").mkdir()  # a multipath path device: not a namespace
    doc, p = probe("nvme_inventory", {"sysfs": str(sysfs), "nvme_cli": False})
    assert p.returncode == 0, p.stderr
    assert doc["namespace_count"] == 2 and doc["namespaces"][0]["size_bytes"] == 2000000 * 512
    links = {c["name"]: c["link"] for c in doc["controllers"]}
    assert links["nvme0"]["degraded"] is False
    assert links["nvme1"]["degraded"] is True and links["nvme1"]["current_speed_gts"] == 8.0
    assert doc["controllers"][0]["smart_error"] == "nvme-cli not installed"


def test_nvme_smart_unread_for_want_of_nvme_cli_is_said_where_nvme_count_asks(tmp_path):
    """Two healthy NVMe controllers (a sysfs tree), no nvme-cli on the node: with nvme_count declared the test errs
    for the node's software (program_missing nvme-cli: SMART critical warnings would go unseen), never passes
    silently; without nvme_count it records the SMART as unread and passes."""
    from project_helpers import replay_captures, replay_suite
    sysfs = tmp_path / "sys"
    for i in range(2):
        bdf = f"0000:0{i + 1}:00.0"
        dev = _pci(sysfs, ["0000:00:01.0", bdf])
        for k, val in (("current_link_speed", "16.0 GT/s PCIe"), ("current_link_width", "4"),
                       ("max_link_speed", "16.0 GT/s PCIe"), ("max_link_width", "4")):
            _w(dev / k, val)
        c = sysfs / "class" / "nvme" / f"nvme{i}"
        c.mkdir(parents=True)
        (c / "device").symlink_to(dev)
        for k, val in (("model", "ACME NVMe"), ("serial", f"S{i}"), ("transport", "pcie"), ("address", bdf)):
            _w(c / k, val)
        _w(sysfs / "block" / f"nvme{i}n1" / "size", "2000000")
    doc, p = probe("nvme_inventory", {"sysfs": str(sysfs), "nvme_cli": False})
    assert p.returncode == 0 and doc["nvme_cli"] is None, p.stderr
    for name, extra, want in (("declared", "nvme_count=2", "error"), ("bare", "", "passed")):
        (tmp_path / name).mkdir()
        caps = replay_captures(tmp_path / name, {"nvme_inventory": ({}, doc)})
        case = replay_suite(tmp_path / name, caps, "test_storage.py", extra_vars=extra, k="nvme_inventory")
        assert case["test_nvme_inventory"]["outcome"] == want, case["test_nvme_inventory"]
    (t,) = [t for t in json.loads((tmp_path / "declared" / "rep" / "results.json").read_text())["tests"]
            if "nvme_inventory" in t["nodeid"]]
    assert "nvme-cli is not installed" in t["message"] and {c["kind"] for c in t["causes"]} == {"program_missing"}


def test_rdma_topology_sysfs_tree(tmp_path):
    sysfs = tmp_path / "sys"
    # GPU0 and mlx5_0 behind one switch (root port 01.0 -> up 10:00.0 -> down 11:00.0 / 11:01.0)
    _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:00.0", "0000:12:00.0"])
    nic = _pci(sysfs, ["0000:00:01.0", "0000:10:00.0", "0000:11:01.0", "0000:13:00.0"])
    # GPU1 on another root port of the same root complex: PHB to mlx5_0
    _pci(sysfs, ["0000:00:02.0", "0000:20:00.0"])
    ib = sysfs / "class" / "infiniband" / "mlx5_0"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(nic)
    for k, val in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("link_layer", "InfiniBand"),
                   ("rate", "400 Gb/sec (4X NDR)")):
        _w(ib / "ports" / "1" / k, val)
    doc, p = probe("rdma", {"sysfs": str(sysfs), "gpu_bus_ids": ["00000000:12:00.0", "00000000:20:00.0"]})
    assert p.returncode == 0, p.stderr
    assert doc["devices"][0]["ports"][0]["rate_gbps"] == 400.0
    assert [(r["gpu_index"], r["nic"], r["path"]) for r in doc["topology"]] == [(0, "mlx5_0", "PIX"),
                                                                                 (1, "mlx5_0", "PHB")]


def _proc_tree(root: Path, modules: str = "", kallsyms: str = "", nvidia_version: str = "") -> Path:
    """A /proc-shaped folder with the three files the rdma probe reads."""
    proc = root / "proc"
    _w(proc / "modules", modules)
    _w(proc / "kallsyms", kallsyms)
    if nvidia_version:
        _w(proc / "driver" / "nvidia" / "version", nvidia_version)
    return proc


PEERMEM_LIVE = ("nvidia_peermem 16384 0 - Live 0xffffffffc0e8e000 (OE)\n"
                "nvidia 11276288 2 nvidia_peermem, Live 0xffffffffc0000000 (POE)")


def _ib_sysfs(root: Path) -> Path:
    sysfs = root / "sys"
    nic = _pci(sysfs, ["0000:00:01.0", "0000:13:00.0"])
    ib = sysfs / "class" / "infiniband" / "mlx5_0"
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(nic)
    return sysfs


def test_rdma_peermem_listed_but_not_registered(tmp_path):
    """nvidia_peermem in /proc/modules, no peer-memory client registered with ib_core: not ready (the old rule
    said ready from the module name alone); registering nv_mem makes it ready."""
    sysfs = _ib_sysfs(tmp_path)
    proc = _proc_tree(tmp_path, PEERMEM_LIVE, "ffffffff8a0 T dma_buf_export\n")
    doc, p = probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": ["00000000:13:00.0"]})
    assert p.returncode == 0, p.stderr
    pm = doc["peermem"]
    assert (pm["nvidia_peermem_loaded"], pm["nvidia_peermem_state"], pm["nv_peermem_registered"],
            pm["memory_peers"], pm["dma_buf_kernel"], pm["ib_umem_dmabuf"]) == (True, "Live", False, {}, True, False)
    r = sj.gdr_readiness(pm)
    assert not r.ready and "nvidia_peermem is listed (state Live) but no peer-memory client is registered" in r.message
    _w(sysfs / "kernel" / "mm" / "memory_peers" / "nv_mem" / "version", "2.0")
    _w(sysfs / "kernel" / "mm" / "memory_peers" / "nv_mem_nc" / "version", "2.0")
    doc, _ = probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": ["00000000:13:00.0"]})
    pm = doc["peermem"]
    assert pm["nv_peermem_registered"] and pm["memory_peers"] == {"nv_mem": "2.0", "nv_mem_nc": "2.0"}
    assert sj.gdr_readiness(pm).via == "nvidia-peermem"


def test_rdma_dmabuf_path_facts(tmp_path):
    """No nvidia_peermem; kernel dma-buf, the RDMA core's dma-buf import and the open kernel module."""
    sysfs = _ib_sysfs(tmp_path)
    proc = _proc_tree(tmp_path, "", "ffffffff8a0 T dma_buf_export\nffffffffc07 t ib_umem_dmabuf_get\t[ib_core]\n",
                      "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build")
    doc, _ = probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": ["00000000:13:00.0"]})
    pm = doc["peermem"]
    assert (pm["nvidia_peermem_loaded"], pm["dma_buf_kernel"], pm["ib_umem_dmabuf"],
            pm["nvidia_open_kernel_module"]) == (False, True, True, True)
    assert sj.gdr_readiness(pm).via == "dma-buf"
    proc = _proc_tree(tmp_path / "closed", "", "ffffffff8a0 T dma_buf_export\n",
                      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Release Build")
    doc, _ = probe("rdma", {"sysfs": str(sysfs), "proc": str(proc), "gpu_bus_ids": ["00000000:13:00.0"]})
    r = sj.gdr_readiness(doc["peermem"])
    assert not r.ready and "nvidia_peermem not loaded" in r.message and "NVIDIA open kernel module" in r.message


# -- end to end: the suites over sshd nodes ---------------------------------------------------------------
def test_suites_end_to_end(tmp_path, sshd_nodes, known_hosts):
    """Two sshd nodes with storage_paths and fs_paths (on this machine's disk, declared expected): junit-storage.xml
    has per-path figures; a limit that cannot be met fails naming path and figure; the shared-fs aggregate sums
    both hosts; NVMe, the GPU journey and the gpudirect tests skip with reasons on this GPU-less, NVMe-less
    machine."""
    nodes = sshd_nodes[:2]
    inv = make_project(tmp_path, nodes, known_hosts, extra_suite=(REPO / "gpuaccept" / "suites" / "test_storage.py").read_text(),
                       name="test_storage.py")
    data = {n.name: tmp_path / f"data-{n.name}" for n in nodes}
    shared = tmp_path / "shared"
    shared.mkdir()
    for d in data.values():
        d.mkdir()
    fstype = findmnt(shared)["fstype"]
    gv = tmp_path / "group_vars"
    gv.mkdir()
    (gv / "gpu.yml").write_text(
        f"fs_paths: [{shared}]\n"
        "storage_fio: {size: 8388608, runtime: 1, numjobs: 1, iodepth: 4, min_free_bytes: 67108864}\n"
        "storage_limits: {seq_read_gbps: 0.0001, fs_aggregate_read_gbps: 0.0001}\n"
        # this machine's disk is the OS disk: say so, as an operator with one disk would
        f"storage_allow_root_fs: true\nfs_allow_root_fs: true\nfs_expect_fstype: [{fstype}]\n")
    hv = tmp_path / "host_vars"
    hv.mkdir()
    (hv / "node1.yml").write_text(f"storage_paths: [{data['node1']}]\n")
    (hv / "node2.yml").write_text(f"storage_paths: [{data['node2']}]\n"
                                  "storage_limits: {seq_read_gbps: 1000000, fs_aggregate_read_gbps: 0.0001}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                     "-n", "2", "-m", "storage or gpudirect", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    cases = {(c["classname"], c["name"].split("[")[0]): c for c in junit(rep / "junit-storage.xml")}
    ok = cases[("storage.node1", "test_local_storage_throughput")]
    assert ok["outcome"] == "passed", ok["message"]
    figs = ok["props"]
    assert float(figs[f"seq_read_gbps {data['node1']}"].split()[0]) > 0
    assert float(figs[f"rand_read_iops {data['node1']}"].split()[0]) > 0
    bad = cases[("storage.node2", "test_local_storage_throughput")]
    assert bad["outcome"] == "failure" and f"seq_read_gbps {data['node2']}" in bad["message"]
    assert "node2" in bad["message"]
    agg = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_shared_fs_aggregate")]
    assert len(agg) == 1 and agg[0]["outcome"] == "passed", agg
    doc = json.loads((rep / "results.json").read_text())
    rd = [f for f in run_figures(doc) if f["check"] == f"fs_aggregate_read_gbps {shared}"]
    assert rd and rd[0]["verdict"] == "pass" and sorted(rd[0]["extra"]["hosts"]) == ["node1", "node2"]
    assert rd[0]["value"] == round(sum(h["read_gbps"] for h in rd[0]["extra"]["hosts"].values()), 4)
    wr = [f for f in run_figures(doc) if f["check"] == f"fs_aggregate_write_gbps {shared}"]
    assert wr[0]["verdict"] == "recorded" and "not judged" in wr[0]["extra"]["note"]
    mounts = [f for f in run_figures(doc) if f["check"] == f"mount {data['node1']}"]
    assert mounts and mounts[0]["extra"]["fstype"] == fstype and mounts[0]["extra"]["problems"] == []
    nvme = cases[("storage.node1", "test_nvme_inventory")]
    assert nvme["outcome"] == "skipped"
    assert cases[("storage.node1", "test_storage_to_gpu")]["outcome"] == "skipped"
    summary = (rep / "summary.md").read_text()
    assert "no NVMe" in summary and "no InfiniBand/RoCE device" in summary  # grouped: the host taken out
    gd = junit(rep / "junit-gpudirect.xml")
    assert gd and all(c["outcome"] == "skipped" for c in gd), gd
    for d in list(data.values()) + [shared]:
        assert leftovers(d) == []


def test_path_on_os_disk_fails_before_fio(tmp_path, root_fs_dir, sshd_nodes, known_hosts):
    """A storage_paths folder on the root filesystem (the mount meant for it is missing): the test fails naming
    the path, the OS disk and the variable that would allow it; fio never runs there (no figure, no files).
    A storage_limits floor with no storage_paths to measure it is an error, not a skip. The shared folder on
    the OS disk of every host fails every host and the aggregate has no value to judge."""
    nodes = sshd_nodes[:2]
    inv = make_project(tmp_path, nodes, known_hosts, extra_suite=(REPO / "gpuaccept" / "suites" / "test_storage.py").read_text(),
                       name="test_storage.py")
    scratch = root_fs_dir / "nvme0-scratch"
    shared = root_fs_dir / "lustre"
    scratch.mkdir()
    shared.mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "node1.yml").write_text(
        f"storage_paths: [{scratch}]\nfs_paths: [{shared}]\n"
        "storage_fio: {size: 8388608, runtime: 1, numjobs: 1, iodepth: 4, min_free_bytes: 67108864}\n"
        "storage_limits: {seq_read_gbps: 0.0001, fs_aggregate_read_gbps: 0.0001}\n")
    (tmp_path / "host_vars" / "node2.yml").write_text(
        f"fs_paths: [{shared}]\nstorage_limits: {{seq_read_gbps: 0.0001, fs_aggregate_read_gbps: 0.0001}}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                     "-n", "2", "-m", "storage", "-k", "local_storage or shared_fs", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    cases = {(c["classname"], c["name"].split("[")[0]): c for c in junit(rep / "junit-storage.xml")}
    bad = cases[("storage.node1", "test_local_storage_throughput")]
    assert bad["outcome"] == "failure", bad
    root = findmnt("/")
    assert (f"node1: storage_paths {scratch} is on the root filesystem ({root['fstype']} {root['source']} mounted "
            f"at {root['target']})") in bad["text"]
    assert "set storage_allow_root_fs: true" in bad["text"]
    err = cases[("storage.node2", "test_local_storage_throughput")]
    assert err["outcome"] == "error" and err["message"] == ("node2: inventory var storage_limits sets seq_read_gbps "
                                                            "but storage_paths is empty: nothing is measured to judge")
    doc = json.loads((rep / "results.json").read_text())
    assert not [f for f in run_figures(doc) if f["check"].startswith(("seq_read_gbps", "fio "))]
    agg = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_shared_fs_aggregate")][0]
    assert agg["outcome"] == "failure"
    for h in ("node1", "node2"):
        assert f"{h}: fs_paths {shared} is on the root filesystem" in agg["text"]
    rd = [f for f in run_figures(doc) if f["check"] == f"fs_aggregate_read_gbps {shared}"][0]
    assert rd["value"] is None and rd["verdict"] == "error" and rd["extra"]["host_count"] == 0  # judged, no value
    assert leftovers(scratch) == [] and leftovers(shared) == []


def test_two_storage_paths_on_one_filesystem(tmp_path):
    """storage_paths lists nvme0 and nvme1, but nvme1 is a symlink to nvme0 (a workaround left after a drive
    died) and a third folder is on the same filesystem: fio measures nvme0 once; the other two fail naming the
    first path and the shared device, and get no figure. Before: three passing sets of figures of one drive."""
    nvme0, other = tmp_path / "nvme0", tmp_path / "other"
    nvme0.mkdir()
    other.mkdir()
    (tmp_path / "nvme1").symlink_to(nvme0)
    nvme1 = tmp_path / "nvme1"
    inv = make_project(tmp_path, [], None, extra_suite=(REPO / "gpuaccept" / "suites" / "test_storage.py").read_text(),
                       name="test_storage.py")
    inv.write_text("h1 ansible_connection=local\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "h1.yml").write_text(
        f"storage_paths: ['{nvme0}', '{nvme1}', '{other}']\nstorage_allow_root_fs: true\n"
        "storage_fio: {size: 8388608, runtime: 1, numjobs: 1, iodepth: 4, min_free_bytes: 67108864}\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "local_storage", timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    case = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_local_storage_throughput")][0]
    dev = findmnt(nvme0)["maj:min"]
    assert case["outcome"] == "failure", case
    assert (f"storage_paths {nvme1} is on the same filesystem as {nvme0} (the same directory) (") in case["text"]
    assert f"storage_paths {other} is on the same filesystem as {nvme0} (" in case["text"]
    assert f"device {dev}): it would measure the same drive again" in case["text"]
    assert f"{nvme0} is on the same" not in case["text"]
    doc = json.loads((rep / "results.json").read_text())
    measured = sorted(f["check"] for f in run_figures(doc) if f["check"].startswith("seq_read_gbps"))
    assert measured == [f"seq_read_gbps {nvme0}"], measured
    assert leftovers(nvme0) == [] and leftovers(other) == []


def test_aggregate_of_runs_that_did_not_overlap_is_not_judged(tmp_path, root_fs_dir, sshd_nodes, known_hosts):
    """Three hosts share fs_paths; node3's fio starts 4 s late (its python is a wrapper that puts a fio first
    on PATH which sleeps before it runs the real one: a slow host), so its 2 s fio runs do not overlap the
    others'. Each host had the filesystem alone: the sum is not one concurrent load, so the aggregate is an
    error naming the overlap, recorded but not judged."""
    shared = root_fs_dir / "shared-skew"
    shared.mkdir()
    slow_bin = tmp_path / "slow-bin"
    slow_bin.mkdir()
    real_fio = shutil.which("fio")
    (slow_bin / "fio").write_text(f"#!/bin/sh\nsleep 4\nexec '{real_fio}' \"$@\"\n")
    (slow_bin / "fio").chmod(0o755)
    wrapper = tmp_path / "python-slow-fio"
    wrapper.write_text(f"#!/bin/sh\nPATH='{slow_bin}':$PATH; export PATH\nexec '{sys.executable}' \"$@\"\n")
    wrapper.chmod(0o755)
    rep, res = _shared_fs_run(tmp_path, sshd_nodes, known_hosts, wrapper,
                              f"fs_paths: [{shared}]\nfs_allow_root_fs: true\n"
                              f"fs_expect_fstype: [{findmnt(shared)['fstype']}]\n", runtime=2, timeout=240)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    agg = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_shared_fs_aggregate")][0]
    assert agg["outcome"] == "error", agg
    for d in ("read", "write"):
        assert f"fs_aggregate_{d}_gbps {shared}: the 3 hosts' fio {d} runs overlapped " in agg["text"], agg["text"]
    assert "the sum is not of one concurrent load, not judged" in agg["text"]
    doc = json.loads((rep / "results.json").read_text())
    for d in ("read", "write"):
        f = [x for x in run_figures(doc) if x["check"] == f"fs_aggregate_{d}_gbps {shared}"][0]
        assert f["verdict"] == "recorded" and f["value"] > 0 and f["extra"]["start_skew_s"] > 3, f
        assert f["extra"]["overlap_s"] < 0 and "not judged" in f["extra"]["note"]
    assert leftovers(shared) == []


def _shared_fs_run(tmp_path, sshd_nodes, known_hosts, wrapper, fs_vars: str, runtime: int, timeout: int):
    """``-k shared_fs`` over the three sshd nodes, node3 started through ``wrapper`` (its Python), with
    ``fs_vars`` and a small fio job in group_vars; returns (report folder, the finished process)."""
    n1, n2, n3 = sshd_nodes
    inv = make_project(tmp_path, [], known_hosts, extra_suite=(REPO / "gpuaccept" / "suites" / "test_storage.py").read_text(),
                       name="test_storage.py",
                       inventory_extra="\n".join([n1.inventory_line(), n2.inventory_line(),
                                                  n3.inventory_line(python=str(wrapper))]) + "\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text(
        fs_vars + f"storage_fio: {{size: 8388608, runtime: {runtime}, numjobs: 1, iodepth: 4, "
                  "min_free_bytes: 67108864}\n"
                  "storage_limits: {fs_aggregate_read_gbps: 0.0001, fs_aggregate_write_gbps: 0.0001}\n")
    rep = tmp_path / "rep"
    return rep, run_pytest(tmp_path, "--inventory", str(inv), "--known-hosts", known_hosts, "--reports", str(rep),
                           "-k", "shared_fs", timeout=timeout)


def test_odd_filesystem_host_left_out_of_aggregate(tmp_path, root_fs_dir, sshd_nodes, known_hosts):
    """Three hosts list the same fs_paths entry; on node3 another filesystem is mounted there (its probes run in
    a mount namespace of their own with a tmpfs on the folder: a real mount only that host sees). node3 fails,
    named with both filesystems, and the aggregate is the sum of node1 and node2 only."""
    shared = root_fs_dir / "shared"
    shared.mkdir()
    unshare = shutil.which("unshare")
    assert unshare and os.geteuid() == 0, "needs util-linux unshare and root (as the sshd rig does)"
    wrapper = tmp_path / "python-odd-mount"
    wrapper.write_text("#!/bin/sh\n"
                       f"exec {unshare} --mount --propagation private /bin/sh -c "
                       f"'mount -t tmpfs -o size=16m odd-fs \"$0\" && exec \"$@\"' '{shared}' '{sys.executable}' \"$@\"\n")
    wrapper.chmod(0o755)
    rep, res = _shared_fs_run(tmp_path, sshd_nodes, known_hosts, wrapper,
                              f"fs_paths: [{shared}]\nfs_allow_root_fs: true\n", runtime=1, timeout=180)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    agg = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_shared_fs_aggregate")][0]
    root = findmnt(shared)
    assert agg["outcome"] == "failure"
    assert (f"node3: fs_paths {shared} is on tmpfs odd-fs mounted at {shared} but 2 of 3 hosts have it on "
            f"{root['fstype']} {root['source']}: left out of the aggregate") in agg["text"]
    assert "node1" not in agg["text"].replace(f"{shared}", "") and "node2" not in agg["text"]
    doc = json.loads((rep / "results.json").read_text())
    for d in ("read", "write"):
        f = [x for x in run_figures(doc) if x["check"] == f"fs_aggregate_{d}_gbps {shared}"][0]
        assert f["verdict"] == "pass" and sorted(f["extra"]["hosts"]) == ["node1", "node2"], f
        assert f["value"] == round(sum(h[f"{d}_gbps"] for h in f["extra"]["hosts"].values()), 4)
        assert "node3" in f["extra"]["left_out"]
    assert leftovers(shared) == []


# -- a full disk, a read-only filesystem: the node's state, not a slow drive ---------------------------
def test_too_little_free_space_is_a_capacity_fact_not_a_slow_drive(tmp_path):
    """fio's path with a margin larger than what is free: the entry carries the fact (free and needed bytes),
    and the judge makes it an ERROR of class capacity whose action is free-space, its command naming the path
    and the GiB to free."""
    from gpuaccept.judging.actions import for_cause
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    doc, _ = probe("fio_throughput", {**SMALL, "paths": [str(tmp_path)], "min_free_bytes": free + (1 << 30)})
    r = doc["paths"][0]
    f = r["failure"]
    assert not r["ok"] and f["reason"] == "free_space" and f["path"] == str(tmp_path), r
    assert abs(f["free_bytes"] - free) < (256 << 20) and f["need_bytes"] == free + (1 << 30) + 64 * MIB
    kind, cause = sj.path_cause(r)
    assert kind == "error" and (cause.cls, cause.kind) == ("capacity", "free_space")
    assert cause.evidence["path"] == str(tmp_path) and 1.0 <= cause.evidence["need_gib"] <= 1.4, cause.evidence
    act = for_cause(cause)
    assert act.action == "free-space" and act.cause == "capacity"
    assert str(tmp_path) in act.command and f"{cause.evidence['need_gib']:g} GiB" in act.command
    assert leftovers(tmp_path) == []
    # the same for the storage -> GPU journey, which writes its files there: a document with the fact, no crash
    doc2, p = probe("storage_to_gpu", {"path": str(tmp_path), "device": "cpu", "bytes": 4 * MIB,
                                       "chunk_bytes": MIB, "min_free_bytes": free + (1 << 30)})
    assert p.returncode == 0 and doc2["failure"]["reason"] == "free_space" and doc2["gpus"] == [], doc2
    assert sj.path_cause(doc2)[1].kind == "free_space"


def test_read_only_filesystem_is_a_configuration_fact(tmp_path):
    """A real read-only mount (a bind mount of a folder of this machine's disk, remounted ro, in a private mount
    namespace): fio's path and the storage -> GPU journey read ``read_only`` (statvfs ST_RDONLY) before anything
    is written; the judge makes it an ERROR of class configuration, action fix-config. A folder the probe may not
    write (its mode 0555, probes run as an unprivileged user) is NOT read-only and reads otherwise."""
    from gpuaccept.judging.actions import for_cause
    ro = tmp_path / "ro"
    ro.mkdir()
    setup = f"mount --bind '{ro}' '{ro}' && mount -o remount,bind,ro '{ro}'"
    doc = probe_in_namespace("fio_throughput", {**SMALL, "paths": [str(ro)]}, setup)
    r = doc["paths"][0]
    assert not r["ok"] and r["failure"] == {"reason": "read_only", "path": str(ro), "read_only": True,
                                            "errno": "EROFS", "seen_by": "statvfs ST_RDONLY"}, r
    assert r["tests"] == {} and r["seq_read_gbps"] is None
    kind, cause = sj.path_cause(r)
    assert kind == "error" and (cause.cls, cause.kind) == ("configuration", "read_only")
    act = for_cause(cause)
    assert act.action == "fix-config" and str(ro) in act.setting and str(ro) in act.command
    s2g = probe_in_namespace("storage_to_gpu", {"path": str(ro), "device": "cpu", "bytes": 4 * MIB,
                                                "chunk_bytes": MIB, "min_free_bytes": 64 * MIB}, setup)
    assert s2g["failure"]["reason"] == "read_only" and "storage_read_gbps" not in s2g
    # not read-only, only not writable for the prober: another fact, another cause (not read_only)
    base = Path(tempfile.mkdtemp(prefix="gpuaccept-test-", dir="/var/tmp"))  # pytest's tmp is root's only (0700)
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        # the probes and an interpreter nobody can reach (the checkout or its venv may sit in a 0700 folder)
        probes = shutil.copytree(PROBES, base / "probes", ignore=shutil.ignore_patterns("__pycache__"))
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python,
                            "fio_throughput.py", json.dumps({**SMALL, "paths": [str(locked)]})], cwd=probes,
                           capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if p.returncode != 0 or not p.stdout.strip():
        pytest.skip(f"cannot run the probe as nobody here: {p.stderr[-300:]}")
    r2 = json.loads(p.stdout.strip().splitlines()[-1])["paths"][0]
    assert r2["failure"]["reason"] == "not_writable" and r2["failure"]["errno"] == "EACCES", r2
    assert sj.path_cause(r2)[1].kind == "not_writable"


def _local_project(tmp_path, host_vars: str) -> tuple[Path, Path]:
    inv = make_project(tmp_path, [], None, extra_suite=(REPO / "gpuaccept" / "suites" / "test_storage.py").read_text(),
                       name="test_storage.py")
    inv.write_text("h1 ansible_connection=local\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "h1.yml").write_text(host_vars)
    return inv, tmp_path / "rep"


def _too_full(tmp_path, paths: list, more: str = "") -> tuple[int, Path, Path]:
    """(margin, inventory, report folder) of a local host whose ``storage_paths`` are ``paths`` and whose fio margin
    (storage_fio.min_free_bytes) is 4 GiB more than the first path's filesystem has free."""
    st = os.statvfs(paths[0])
    margin = st.f_bavail * st.f_frsize + (4 << 30)
    inv, rep = _local_project(tmp_path, f"storage_paths: [{', '.join(map(str, paths))}]\nstorage_allow_root_fs: true\n"
                                        f"storage_fio: {{size: 8388608, runtime: 1, numjobs: 1, iodepth: 4, "
                                        f"min_free_bytes: {margin}}}\n{more}")
    return margin, inv, rep


def test_full_disk_end_to_end_is_an_error_with_a_free_space_action(tmp_path):
    """The suite over a local host whose storage path has less free space than the margin the inventory asks
    (storage_fio.min_free_bytes): test_local_storage_throughput is an ERROR (not measured), never FAILED, with
    the probe's facts recorded and no figure."""
    data = tmp_path / "nvme0"
    data.mkdir()
    margin, inv, rep = _too_full(tmp_path, [data], "storage_limits: {seq_read_gbps: 0.0001}\n")
    res = run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "local_storage", timeout=180)
    case = [c for c in junit(rep / "junit-storage.xml") if c["name"].startswith("test_local_storage_throughput")][0]
    assert case["outcome"] == "error", (case, res.stdout[-2000:])
    assert f"h1: not enough free space on {data}: " in case["text"]  # after a "disturbed" line on a busy machine
    doc = json.loads((rep / "results.json").read_text())
    rec = [t for t in doc["tests"] if t["name"].startswith("test_local_storage_throughput")][0]
    fio = [f for f in run_figures(doc) if f["check"] == f"fio {data}"][0]
    assert fio["extra"]["failure"]["reason"] == "free_space" and fio["extra"]["failure"]["need_bytes"] > margin
    assert not [f for f in run_figures(doc) if f["check"].startswith("seq_read_gbps")]
    assert rec["outcome"] == "error" and rec["action"]["action"] != "drain-rma"
    if rec.get("causes"):  # the record's causes, where the report plugin keeps an error's (see the report)
        assert [(c["class"], c["kind"]) for c in rec["causes"]] == [("capacity", "free_space")]
        assert rec["action"]["action"] == "free-space" and rec["action"]["cause"] == "capacity"
    assert leftovers(data) == []


def test_fewer_nvme_namespaces_than_declared_is_the_nodes_configuration_not_a_drain(tmp_path):
    """nvme_count says 64 on this machine (no such node exists): a count alone shows no drive failing, and a rerun
    counts the same, so the finding is configuration (fix-config: the inventory, the driver, the namespaces), never
    drain-rma nor rerun."""
    inv = make_project(tmp_path, [], None)
    inv.write_text("[gpu]\nnodeD ansible_connection=local nvme_count=64\n")
    rep = tmp_path / "rep"
    res = run_pytest(tmp_path, "--inventory", str(inv), "-m", "storage", "-k", "nvme_inventory", "--reports",
                     str(rep), "--history", "none", "-p", "no:cacheprovider",
                     env={"GPUACCEPT_NODE_LOCK_DIR": str(tmp_path / "lock")})
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    (t,) = [t for t in json.loads((rep / "results.json").read_text())["tests"] if "test_nvme_inventory" in t["nodeid"]]
    (entry,) = [e for e in t["failures"] if e.get("check") == "nvme_count"]
    assert entry["cause"]["kind"] == "nvme_count_short" and entry["action"]["action"] == "fix-config", entry
    assert entry["cause"]["class"] == "configuration", entry
    assert "drain-rma" not in (rep / "summary.md").read_text()


def test_a_shared_path_missing_on_one_host_fails_that_host_as_placement(tmp_path):
    """fs_paths with a typo on nodeG, a real folder on nodeH: nodeG fails under its own name (its FAIL, its line in
    failed-hosts.txt), configuration placement (mount it or correct fs_paths), not the network's."""
    good = tmp_path / "stor"
    good.mkdir()
    rep, t = fleet_test(tmp_path, ["[n]", f"nodeG ansible_connection=local fs_paths={tmp_path}/shared-typo",
                                   f"nodeH ansible_connection=local fs_paths={good} fs_allow_root_fs=true"],
                        "test_storage.py", "test_shared_fs_aggregate")
    (entry,) = [e for e in t["failures"] if e["host"] == "nodeG"]
    assert entry["cause"]["kind"] == "placement" and entry["action"]["action"] == "fix-config", entry
    assert "nodeG" in (rep / "failed-hosts.txt").read_text().split()
    assert "- **FAIL** `nodeG`" in (rep / "summary.md").read_text()


def test_a_gap_beside_a_failure_keeps_its_cause(tmp_path):
    """Two storage paths on one filesystem (a placement failure: one drive measured twice) and too little free
    space for fio on the one measured: the test FAILS for the placement, and the free-space gap beside it keeps its
    cause (capacity) in the record's causes, so that the operator sees both fixes; the action is the stronger
    (fix-config), never drain-rma."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _, inv, rep = _too_full(tmp_path, [a, b])
    run_pytest(tmp_path, "--inventory", str(inv), "--reports", str(rep), "-k", "local_storage", timeout=180)
    rec = [t for t in json.loads((rep / "results.json").read_text())["tests"]
           if t["name"].startswith("test_local_storage_throughput")][0]
    assert rec["outcome"] == "failed", rec
    assert "not enough free space" in rec["message"], rec["message"]
    assert ("capacity", "free_space") in [(c["class"], c["kind"]) for c in rec["causes"]], rec["causes"]
    assert rec["action"]["action"] == "fix-config", rec["action"]
    assert leftovers(a) == [] and leftovers(b) == []
