"""The test_nvlink suite ships in the package (gpuaccept/suites/test_nvlink.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_nvlink.py::...)."""
from gpuaccept.suites.test_nvlink import *  # noqa: F401,F403
from gpuaccept.suites.test_nvlink import pytestmark  # noqa: F401
