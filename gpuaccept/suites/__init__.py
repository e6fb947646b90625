"""The suites: one pytest module per layer (``test_<layer>[_more].py``), shipped inside the package so that
an installed gpuaccept runs from any folder: ``gpuaccept --inventory prod.ini`` or
``pytest --pyargs gpuaccept --inventory prod.ini``. Each asks the node for a probe and records figures; the
fixtures (``node``, ``nodes``, ``gpus``, ``sku``, ``verdicts``) come from gpuaccept.plugin.

The repository's top-level ``suites/`` holds one-line shims of these modules, so that ``pytest`` in a
checkout runs them with the test ids it always had (``suites/test_memory.py::test_hbm_bandwidth[gpu-07]``).
"""
