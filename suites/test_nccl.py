"""The test_nccl suite ships in the package (gpuaccept/suites/test_nccl.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_nccl.py::...)."""
from gpuaccept.suites.test_nccl import *  # noqa: F401,F403
from gpuaccept.suites.test_nccl import pytestmark  # noqa: F401
