"""Shared harness for node-side probes (standard library only).

A probe's ``main(args: dict) -> dict`` is wrapped by :func:`run`: arguments come as one JSON object in
``sys.argv[1]`` (or ``{}``), the result dict is printed as ONE JSON document on the last line of stdout,
logs go to stderr. Any exception (or a raised :class:`ProbeFailed`) prints
``{"failed": true, "msg": "..."}`` and exits with rc 1.
"""
from __future__ import annotations

import json
import sys
import time
import traceback


class ProbeFailed(Exception):
    """Raise from a probe to fail with a clean one-line message (no traceback in ``msg``)."""


def reject_unknown(args: dict, known) -> None:
    """Fail with ``unknown argument(s): a, b`` when ``args`` has keys outside ``known`` (typos never pass)."""
    unknown = set(args) - set(known)
    if unknown:
        raise ProbeFailed(f"unknown argument(s): {', '.join(sorted(unknown))}")


def log(*parts) -> None:
    """Print a log line to stderr (never stdout, which carries the JSON document)."""
    print(*parts, file=sys.stderr, flush=True)


def emit(doc: dict) -> None:
    """Print ``doc`` as one JSON line on stdout."""
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()


def run(main) -> None:
    """Run ``main(args)`` as a probe: parse argv, emit the result or a failure document, exit."""
    t0 = time.time()
    try:
        args = json.loads(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else {}
        if not isinstance(args, dict):
            raise ProbeFailed("probe arguments must be a JSON object")
        doc = main(args)
        doc.setdefault("probe_seconds", round(time.time() - t0, 3))
        emit(doc)
        sys.exit(0)
    except ProbeFailed as e:
        emit({"failed": True, "msg": str(e)})
        sys.exit(1)
    except SystemExit:
        raise
    except BaseException as e:  # a crash: keep the traceback on stderr as evidence
        traceback.print_exc()
        emit({"failed": True, "msg": f"{type(e).__name__}: {e}".splitlines()[0][:500]})
        sys.exit(1)
