"""The test_compute suite ships in the package (gpuaccept/suites/test_compute.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_compute.py::...)."""
from gpuaccept.suites.test_compute import *  # noqa: F401,F403
from gpuaccept.suites.test_compute import pytestmark  # noqa: F401
