"""The test_health_config suite ships in the package (gpuaccept/suites/test_health_config.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_health_config.py::...)."""
from gpuaccept.suites.test_health_config import *  # noqa: F401,F403
from gpuaccept.suites.test_health_config import pytestmark  # noqa: F401
