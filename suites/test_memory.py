"""The test_memory suite ships in the package (gpuaccept/suites/test_memory.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_memory.py::...)."""
from gpuaccept.suites.test_memory import *  # noqa: F401,F403
from gpuaccept.suites.test_memory import pytestmark  # noqa: F401
