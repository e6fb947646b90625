"""``python -m gpuaccept.reporting.history``: one GPU's or one host's figures over time (gpuaccept.reporting.history.cli)."""
import sys

from gpuaccept.reporting.history.cli import main

sys.exit(main())
