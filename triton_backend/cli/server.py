"""`nlg-triton`: run tritonserver from the nvidia-pytriton wheel on this project's model repository.

Everything after the known options goes to tritonserver unchanged, e.g.
`nlg-triton --preset tiny -- --http-port 9000 --log-verbose 1`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from triton_backend.launch import DEFAULT_MODEL_REPOSITORY, server_command, server_environment
from triton_backend.presets import PRESETS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nlg-triton", description=__doc__)
    parser.add_argument("--model-repository", type=Path, default=DEFAULT_MODEL_REPOSITORY)
    parser.add_argument("--preset", choices=PRESETS, help="override the model's preset (NLG_PRESET)")
    parser.add_argument("--weights-path", help="Hugging Face checkpoint dir (NLG_WEIGHTS_PATH)")
    args, passthrough = parser.parse_known_args(argv)
    env = server_environment()
    if args.preset:
        env["NLG_PRESET"] = args.preset
    if args.weights_path:
        env["NLG_WEIGHTS_PATH"] = str(Path(args.weights_path).resolve())
    command = server_command(args.model_repository.resolve(), [a for a in passthrough if a != "--"])
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    raise SystemExit(main())
