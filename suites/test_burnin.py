"""The test_burnin suite ships in the package (gpuaccept/suites/test_burnin.py); this shim keeps `pytest` in the checkout
collecting it with the test ids it always had (suites/test_burnin.py::...)."""
from gpuaccept.suites.test_burnin import *  # noqa: F401,F403
from gpuaccept.suites.test_burnin import pytestmark  # noqa: F401
