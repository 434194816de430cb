"""``python -m nlgsim``: see :mod:`nlgsim.cli`."""

import sys

from nlgsim.cli import main

sys.exit(main())
