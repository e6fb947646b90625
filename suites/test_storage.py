"""The test_storage suite ships in the package (gpuaccept/suites/test_storage.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_storage.py::...)."""
from gpuaccept.suites.test_storage import *  # noqa: F401,F403
from gpuaccept.suites.test_storage import pytestmark  # noqa: F401
