"""``python -m tirl ...``: the ``tirl`` command line (:func:`tirl.cli.main`), as the installed script runs it."""

from __future__ import annotations

import sys

from tirl.cli import main

if __name__ == "__main__":
    sys.argv[0] = "tirl"
    raise SystemExit(main())
