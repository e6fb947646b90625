"""gpuaccept's benchmarks and its GPU acceptance scenarios (benchmarks/README.md lists each with its command).

A package so that the scenario runner runs as ``python -m benchmarks.scenarios`` from the repository root and its
modules can be imported by tests/test_scenarios.py; the CPU benchmarks stay scripts (``python benchmarks/x.py``).
"""
