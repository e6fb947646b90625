pytest_plugins = ["gpuaccept.plugin"]
