"""The test_gpudirect suite ships in the package (gpuaccept/suites/test_gpudirect.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_gpudirect.py::...)."""
from gpuaccept.suites.test_gpudirect import *  # noqa: F401,F403
from gpuaccept.suites.test_gpudirect import pytestmark  # noqa: F401
