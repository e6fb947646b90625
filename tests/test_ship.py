"""What the agent's start reads (gpuaccept/runner/ship.py): the probe files as one frame, made once per run."""
from __future__ import annotations

import json
import os
import threading
import zlib

from gpuaccept.runner import ship


def test_payload_frame_holds_the_agents_own_files_as_on_disk():
    frame = ship.payload()
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    files = json.loads(zlib.decompress(frame[4:]))
    assert sorted(files) == sorted(ship.agent_files())
    assert {"_agent.py", "_bytecode.py", "_watchdog.py", "_zygote.py", "_nodelock.py"} <= set(files)
    assert "gpu_inventory.py" not in files
    for name, text in files.items():
        with open(os.path.join(ship.PROBE_DIR, name), encoding="utf-8") as f:
            assert text == f.read()


def test_texts_of_every_probe_file_and_needed_files_of_a_probe():
    on_disk = sorted(f for f in os.listdir(ship.PROBE_DIR) if f.endswith(".py"))
    assert sorted(ship.texts(None)) == on_disk
    need = ship.needed_files("gpu_inventory")
    assert "gpu_inventory.py" in need and "_nvml.py" in need and "matmul_tflops.py" not in need
    assert ship.needed_files("no_such_probe") is None


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
