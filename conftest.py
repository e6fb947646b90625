"""The repository's conftest: nothing to do. The plugin is loaded by pytest.ini (``-p gpuaccept.plugin`` in
addopts: the same module the installed pytest11 entry point names, so it registers once either way). A
``pytest_plugins`` here would break collecting the packaged suites (gpuaccept/suites) of an editable install
from another folder: pytest refuses ``pytest_plugins`` in a conftest.py that is not at the rootdir."""
