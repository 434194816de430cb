"""``python -m benchmarks.scaling [--workers 2]``: every experiment afresh, then the report and its figures."""

from __future__ import annotations

import argparse
import sys

from benchmarks.scaling import render, runner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runner.main(["--workers", str(args.workers)])
    return render.main([])


if __name__ == "__main__":
    sys.exit(main())
