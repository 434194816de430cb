"""Triton's Python API (`pb_utils`) as far as the response thread and the metrics use it, for tests
that run them without a server. Each metric update goes to `record`, which a test overrides to keep
what it checks."""

from __future__ import annotations

from typing import Any


class FakePbUtils:
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    def __init__(self) -> None:
        pb = self

        class Metric:
            def __init__(self, name: str, labels: dict[str, str]) -> None:
                self.name, self.labels = name, labels

            def set(self, value: float) -> None:
                pb.record("set", self.name, self.labels, value)

            def increment(self, value: float) -> None:
                pb.record("increment", self.name, self.labels, value)

            def observe(self, value: float) -> None:
                pb.record("observe", self.name, self.labels, value)

        class MetricFamily:
            GAUGE, COUNTER, HISTOGRAM = "gauge", "counter", "histogram"

            def __init__(self, name: str, description: str, kind: str) -> None:
                self.name = name

            def Metric(self, labels: dict[str, str], buckets: list[float] | None = None) -> Metric:  # noqa: N802
                return Metric(self.name, labels)

        class TritonError:
            INVALID_ARG, INTERNAL, CANCELLED = "invalid", "internal", "cancelled"

            def __init__(self, message: str, code: str) -> None:
                self.message, self.code = message, code

        self.MetricFamily = MetricFamily
        self.TritonError = TritonError

    def record(self, kind: str, name: str, labels: dict[str, str], value: float) -> None:
        """One metric update: `kind` is set, increment or observe."""

    @staticmethod
    def Tensor(name: str, array: Any) -> tuple[str, Any]:  # noqa: N802
        return name, array

    @staticmethod
    def InferenceResponse(output_tensors: Any = None, error: Any = None) -> dict[str, Any]:  # noqa: N802
        return {"outputs": output_tensors, "error": error}
