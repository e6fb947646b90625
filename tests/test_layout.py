"""How the test folder is laid out: shared helpers live in helper modules (project_helpers.py for projects run
end to end and the replayed captures, probe_helpers.py for probes, sshd.py for the loopback nodes); no test
file imports another, so running one file never collects or runs another file's module code."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_file_imports_another():
    found = []
    for f in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{f.name}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[-1].startswith("test_") or n.startswith("tests.test_")]
    assert found == []
