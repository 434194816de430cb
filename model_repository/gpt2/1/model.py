"""Triton entry point; the engine lives in the triton_backend package (see triton_backend/triton_model.py)."""

from triton_backend.triton_model import GPT2Model


class TritonPythonModel:
    def initialize(self, args):
        self._model = GPT2Model(args)

    def execute(self, requests):
        self._model.execute(requests)
        return None

    def finalize(self):
        self._model.finalize()
