"""`nlg-triton`: run tritonserver from the nvidia-pytriton wheel on this project's model repository.

Everything after the known options goes to tritonserver unchanged, e.g.
`nlg-triton --preset tiny -- --http-port 9000 --log-verbose 1`. The model's drain and tritonserver's
`--exit-timeout-secs` both follow `--max-stream-seconds` (DrainBudget in triton_backend/settings.py),
so a stop (SIGTERM, Ctrl-C) lets the streams finish and never runs into Triton's forced exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from triton_backend.launch import DEFAULT_MODEL_REPOSITORY, server_command, server_environment, with_drain_budget
from triton_backend.model_shapes import PRESETS
from triton_backend.server_stop import parse_server_args
from triton_backend.settings import MAX_STREAM_SECONDS, DrainBudget
from triton_backend.shm_sweep import sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nlg-triton", description=__doc__)
    parser.add_argument("--model-repository", type=Path, default=DEFAULT_MODEL_REPOSITORY)
    parser.add_argument("--preset", choices=PRESETS, help="override the model's preset (NLG_PRESET)")
    parser.add_argument("--weights-path", help="Hugging Face checkpoint dir (NLG_WEIGHTS_PATH)")
    parser.add_argument(
        "--max-stream-seconds",
        type=int,
        default=MAX_STREAM_SECONDS,
        help="the longest stream a stop lets finish; sets the drain and the exit timeout (default %(default)s)",
    )
    args, passthrough = parser.parse_known_args(argv)
    if args.max_stream_seconds < 1:
        parser.error(f"--max-stream-seconds: must be an integer >= 1, got {args.max_stream_seconds}")
    env = server_environment()
    if args.preset:
        env["NLG_PRESET"] = args.preset
    if args.weights_path:
        env["NLG_WEIGHTS_PATH"] = str(Path(args.weights_path).resolve())
    try:
        server_args = with_drain_budget(
            DrainBudget(args.max_stream_seconds), env, [a for a in passthrough if a != "--"]
        )
    except ValueError as err:
        parser.error(str(err))
    # A server killed before (SIGKILL, the OOM killer) left its shared memory; a memory-backed /dev/shm
    # keeps it across restarts.
    sweep(prefixes=(parse_server_args(server_args).shm_region_prefix,), environ=env)
    command = server_command(args.model_repository.resolve(), server_args)
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    raise SystemExit(main())

