"""``python -m gateway.bench``: see :mod:`gateway.bench.cli`."""

from __future__ import annotations

import sys

from gateway.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
