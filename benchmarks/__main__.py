"""``python -m benchmarks``: the benchmark runner (benchmarks/runner.py)."""

import sys

from .runner import main

sys.exit(main())
