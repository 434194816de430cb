"""``python -m benchmarks.scaling [--only KEY ...] [--workers 2]``: the experiments afresh (all of them, or
those named, keeping the others' numbers), then the report and its figures."""

from __future__ import annotations

import argparse
import sys

from benchmarks.scaling import render, runner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", default=[], help="experiment keys to run (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    code = runner.main(["--workers", str(args.workers), "--only", *args.only])
    return code or render.main([])


if __name__ == "__main__":
    sys.exit(main())
