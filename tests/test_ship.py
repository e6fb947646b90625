"""What the agent's start reads (gpuaccept/runner/ship.py): the probe files as one frame, made once per run."""
from __future__ import annotations

import json
import os
import threading
import zlib

from gpuaccept.runner import ship


def test_payload_frame_holds_every_probe_file_as_on_disk():
    frame = ship.payload()
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    files = json.loads(zlib.decompress(frame[4:]))
    on_disk = sorted(f for f in os.listdir(ship.PROBE_DIR) if f.endswith(".py"))
    assert sorted(files) == on_disk
    with open(os.path.join(ship.PROBE_DIR, "_agent.py"), encoding="utf-8") as f:
        assert files["_agent.py"] == f.read()


def test_agents_starting_at_once_make_the_payload_once():
    ship._payload.cache_clear()
    start = threading.Barrier(32)
    got: list[bytes] = []

    def one():
        start.wait()
        got.append(ship.payload())

    threads = [threading.Thread(target=one) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ship._payload.cache_info().misses == 1
    assert len(got) == 32 and len(set(got)) == 1
