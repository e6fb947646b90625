"""The test_health_driver suite ships in the package (gpuaccept/suites/test_health_driver.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_health_driver.py::...)."""
from gpuaccept.suites.test_health_driver import *  # noqa: F401,F403
from gpuaccept.suites.test_health_driver import pytestmark  # noqa: F401
