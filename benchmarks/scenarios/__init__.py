"""The GPU evidence as one scenario suite: each claim gpuaccept makes about real GPUs is a YAML file here
(benchmarks/scenarios/spec.py says what a file holds), and ``python -m benchmarks.scenarios`` runs them on the GPU
machine and prints whether each still holds (``__main__``). Modules: ``spec`` (reading a file), ``execute``
(running one scenario), ``loads`` (foreign loads, stopped by their process group), ``expect`` (checking a
report folder), ``peers`` (BabelStream, mamf-finder and nccl-tests beside the product's figures).
"""
