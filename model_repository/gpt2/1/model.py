"""Triton entry point; the engine lives in the triton_backend package (see triton_backend/triton_model.py)."""

import os
import site
import sys


def _honour_pythonpath() -> None:
    # The Python backend stub embeds an interpreter that ignores PYTHONPATH, so a virtualenv named
    # there (nlg-triton sets it) would be invisible. Its entries go first, with their .pth files.
    before = list(sys.path)
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in before:
            site.addsitedir(entry)
    sys.path[:] = [p for p in sys.path if p not in before] + before


_honour_pythonpath()
# Read once, when torch loads OpenMP: its workers sleep between operations unless the server's
# environment says otherwise (see triton_backend/engine_loop.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from triton_backend.load_errors import frameless  # noqa: E402
from triton_backend.triton_model import GPT2Model  # noqa: E402


class TritonPythonModel:
    def __init__(self):
        # A setting's error then reaches the log as its one line, without the stub's traceback.
        self.initialize = frameless(lambda args: setattr(self, "_model", GPT2Model(args)))

    def execute(self, requests):
        self._model.execute(requests)
        return None

    def finalize(self):
        self._model.finalize()
