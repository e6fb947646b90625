"""gpuaccept.config.sshlib: paramiko imported without Invoke, and ``Match exec`` still read through the real Invoke.

Each case runs in a fresh interpreter: this test process has imported paramiko (and Invoke) long before."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _fresh(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter; return what it printed."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_ssh_transport_imports_paramiko_without_invoke():
    got = _fresh("""
        import json, sys
        import gpuaccept.transport.ssh, gpuaccept.config.sshconfig, gpuaccept.transport.ssh_connect
        print(json.dumps({"paramiko": "paramiko" in sys.modules, "invoke": "invoke" in sys.modules,
                          "asyncio": "asyncio" in sys.modules}))
    """)
    assert got == {"paramiko": True, "invoke": False, "asyncio": False}


def test_match_exec_runs_its_command_through_the_real_invoke(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text('Match exec "test -e %s"\n  User present\nMatch exec "false"\n  Port 2222\nHost *\n  Port 22\n'
                   % (tmp_path / "flag"))
    (tmp_path / "flag").write_text("")
    got = _fresh(f"""
        import json, sys
        from gpuaccept.config.sshlib import import_paramiko
        p = import_paramiko()
        before = "invoke" in sys.modules
        c = p.SSHConfig.from_path({str(cfg)!r}).lookup("node1")
        print(json.dumps({{"before": before, "after": "invoke" in sys.modules, "user": c.get("user"),
                          "port": c.get("port"), "real": type(p.config.invoke).__name__}}))
    """)
    assert got == {"before": False, "after": True, "user": "present", "port": "22", "real": "module"}


def test_an_invoke_imported_before_is_left_as_it_was():
    got = _fresh("""
        import json, sys, invoke
        from gpuaccept.config.sshlib import import_paramiko
        p = import_paramiko()
        print(json.dumps({"same": p.config.invoke is invoke}))
    """)
    assert got == {"same": True}


def test_without_invoke_installed_match_exec_raises_its_import_error(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text('Match exec "true"\n  User x\n')
    got = _fresh(f"""
        import json, sys
        from gpuaccept.config.sshlib import import_paramiko
        p = import_paramiko()
        sys.modules["invoke"] = None  # as on a machine without Invoke
        try:
            p.SSHConfig.from_path({str(cfg)!r}).lookup("node1")
            print(json.dumps({{"raised": None}}))
        except ImportError as e:
            print(json.dumps({{"raised": type(e).__name__}}))
    """)
    assert got == {"raised": "ModuleNotFoundError"}
