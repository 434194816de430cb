"""The deploy tests read the chart and talk to tritonserver with the Helm and serving suites' kits."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for kit in ("helm", "serving"):
    if str(TESTS / kit) not in sys.path:
        sys.path.append(str(TESTS / kit))
