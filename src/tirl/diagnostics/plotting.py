"""matplotlib for tirl's plots (the report, the ablation figure): the Agg backend, and no files outside the output.

matplotlib keeps a font cache and looks for a config in ``$MPLCONFIGDIR``, else ``~/.config/matplotlib`` and
``~/.cache/matplotlib``: ``tirl report`` wrote those into ``$HOME``, and with a ``$HOME`` it cannot write
(read-only, missing, under a file) printed two lines about it on stderr. :func:`pyplot` imports matplotlib
with ``MPLCONFIGDIR`` set to a temporary directory of this process, removed at exit, unless the user set
``MPLCONFIGDIR``; the variable is put back as it was once matplotlib has read it, so processes started later
do not inherit a directory that goes away. The cost: the font list is built again in each process (about a
second).

Not covered: a process that imported matplotlib before (it keeps the directory it chose), and a temporary
directory that cannot be made (matplotlib then picks its own place, as before).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from typing import Any


def _private_config_dir() -> str | None:
    """A fresh temporary directory removed when the process exits; ``None`` when none can be made."""
    try:
        path = tempfile.mkdtemp(prefix="tirl-matplotlib-")
    except OSError:
        return None
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, its cache in this process's own directory (see the module doc)."""
    if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
        private = _private_config_dir()
        if private is not None:
            os.environ["MPLCONFIGDIR"] = private
            try:
                import matplotlib

                matplotlib.get_configdir()  # both are read once and kept: the variable can go
                matplotlib.get_cachedir()
            finally:
                os.environ.pop("MPLCONFIGDIR", None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


__all__ = ["pyplot"]
