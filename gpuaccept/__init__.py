"""gpuaccept: Ansible-style acceptance tests for GPU clusters, run by pytest."""

__version__ = "0.1.0"
