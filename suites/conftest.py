"""Suite-level collection rule: the burn-in layer runs only when asked for by marker (``-m burnin``).

A burn-in holds a node for many minutes; a plain ``pytest`` (the main job) must not start one by surprise.
"""


def pytest_collection_modifyitems(config, items):
    if "burnin" in (config.option.markexpr or ""):
        return
    keep = [it for it in items if it.get_closest_marker("burnin") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it.get_closest_marker("burnin") is not None])
        items[:] = keep
