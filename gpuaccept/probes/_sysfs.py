"""Small kernel files (sysfs, procfs) read on the node: standard library only, shipped with the probes."""
from __future__ import annotations


def read_text(path: str, strip: bool = True) -> str | None:
    """The text of ``path`` (UTF-8, undecodable bytes replaced), surrounding whitespace removed unless
    ``strip`` is False; None when the file is missing or unreadable (a sysfs attribute the driver does not
    expose, a permission refused): callers report that as "unknown", never as an error of the probe."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text.strip() if strip else text
