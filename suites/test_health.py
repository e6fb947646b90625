"""The test_health suite ships in the package (gpuaccept/suites/test_health.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_health.py::...)."""
from gpuaccept.suites.test_health import *  # noqa: F401,F403
from gpuaccept.suites.test_health import pytestmark  # noqa: F401
