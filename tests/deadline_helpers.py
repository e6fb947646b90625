"""A real shared library standing in for libnvidia-ml.so.1 whose nvmlDeviceGetCount_v2 does not return (tests of
gpuaccept/probes/_deadline.py): it sleeps, or, with FAKE_NVML_FROZEN_FILE set, writes into a frozen filesystem and
so waits in uninterruptible sleep (D), as a call into a wedged driver does. Built with the machine's C compiler."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
int nvmlInitWithFlags(unsigned int flags) { return 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "Function Not Found"; }
int nvmlDeviceGetCount_v2(unsigned int *n) {
    const char *p = getenv("FAKE_NVML_FROZEN_FILE");
    if (p) { int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644); if (fd >= 0) { write(fd, "x", 1); close(fd); } }
    else sleep(3600);
    *n = 0;
    return 0;
}
"""


def blocking_nvml(folder: Path) -> Path:
    """Build ``folder/libnvidia-ml.so.1`` (pynvml loads it through LD_LIBRARY_PATH=folder); returns ``folder``.
    Raises RuntimeError when no C compiler is installed."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build the blocking libnvidia-ml.so.1")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fake_nvml.c").write_text(SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / "libnvidia-ml.so.1"), str(folder / "fake_nvml.c")],
                   check=True)
    return folder
