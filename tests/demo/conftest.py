"""The demo's tests drive a live App with the autoscaler suite's kit, which imports its fake API server
by module name: the autoscaler tests' folder is on the path whether or not they run in the same session."""

from __future__ import annotations

import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "autoscaler"
if str(KIT) not in sys.path:
    sys.path.append(str(KIT))
