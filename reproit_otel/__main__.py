"""``python -m reproit_otel``: the ``reproit-otel`` command line."""

from __future__ import annotations

import sys

from reproit_otel.cli import main

if __name__ == "__main__":
    sys.exit(main())
