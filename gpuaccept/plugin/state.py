"""The run state of the pytest plugin: one :class:`RunState` per pytest process, kept in ``config.stash``
under :data:`STATE` (``config.stash[STATE]``; absent while the plugin is dormant).

Made by ``gpuaccept.plugin.pytest_configure`` once the inventory, the limit and the threshold files are read
and checked (exit 4 before any node is touched); an xdist worker's copy takes the controller's start time,
probe folder and progress folder from its ``workerinput`` (``gpuaccept.plugin.pytest_configure_node``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuaccept.config.inventory import Host, Inventory
from gpuaccept.config.thresholds import SkuSpec
from gpuaccept.runner.host import HostRunner
from gpuaccept.runner.prefetch import Prefetcher


@dataclass
class RunState:
    """What the plugin's hooks and fixtures share during one run.

    ``inventory``: the parsed inventory; ``hosts``: the selected hosts (``--limit``, ``--shard``), in inventory
    order; ``specs``: SKU name -> threshold file (gpuaccept.config.thresholds); ``hostvars``: host -> {var:
    parsed value} (gpuaccept.config.hostvars, checked at configure); ``started``: Unix time the run began (the
    controller's clock, also in every worker); ``nodes``: host name -> its HostRunner, made on first use;
    ``probe_dir``: the report folder's ``probes/`` (every probe's raw document, per host), None before the
    report folder exists; ``progress_dir``: the folder through which xdist workers' probes reach the
    controller's progress display (gpuaccept.runner.progress_relay), None without workers; ``prefetch``: the
    cross-host prefetcher of a run without xdist (gpuaccept.runner.prefetch), None otherwise; ``release``: test
    item -> the hosts whose cached probe documents are dropped once it has ended (gpuaccept.plugin.release), empty
    under xdist.
    """

    inventory: Inventory
    hosts: list[Host]
    specs: dict[str, SkuSpec]
    hostvars: dict[str, dict[str, Any]]
    started: float
    nodes: dict[str, HostRunner] = field(default_factory=dict)
    probe_dir: str | None = None
    progress_dir: str | None = None
    prefetch: Prefetcher | None = None
    release: dict[Any, list[str]] = field(default_factory=dict)


#: where ``config.stash`` keeps the run's :class:`RunState`
STATE = pytest.StashKey[RunState]()
