"""Node-side probes. Each file is one measurement, run on the node as ``python3 probe.py '<json args>'``.

The runner ships this whole folder to the node (a fresh temporary directory per run, removed at the end),
so a probe may import ``_probe`` (the shared harness) but nothing else of gpuaccept. Probes depend only on
the standard library, torch and pynvml.
"""
