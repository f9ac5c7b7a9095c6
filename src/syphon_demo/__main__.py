"""``python -m syphon_demo [--config FILE]``: the whole outage-and-recovery story."""

from __future__ import annotations

import sys

from syphon_demo.demo import main

if __name__ == "__main__":
    sys.exit(main())
