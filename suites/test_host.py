"""The test_host suite ships in the package (gpuaccept/suites/test_host.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_host.py::...)."""
from gpuaccept.suites.test_host import *  # noqa: F401,F403
from gpuaccept.suites.test_host import pytestmark  # noqa: F401
