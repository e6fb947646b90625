"""``python -m gpuaccept.reporting.history``: one GPU's or one host's figures over time (gpuaccept.reporting.history.cli)."""
import sys

from gpuaccept.config.outputs import quiet_when_reader_closes
from gpuaccept.reporting.history.cli import main

sys.exit(quiet_when_reader_closes(main))  # `... | head -10`: the output ends there, no traceback
