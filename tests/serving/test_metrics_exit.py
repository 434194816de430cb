"""The model's Triton metrics outlive its stub's exit: Triton 2.51's stub, freeing them during its own
teardown, died of SIGSEGV (a strace of a plain server stopped with 8 streams open saw the stub "killed
by SIGSEGV" in 2 runs of 2 before, none in 2 after); freeing them at finalize instead made a server
whose model was scaled in place abort (tests/autoscaler/test_triton_scaling.py)."""

from __future__ import annotations

import gc
import weakref

from fake_pb_utils import FakePbUtils

from triton_backend.presets import ModelInfo
from triton_backend.triton_metrics import TritonMetrics


class PbUtils(FakePbUtils):
    def __init__(self) -> None:
        super().__init__()
        self.freed: list[str] = []
        pb, family_class = self, self.MetricFamily

        class MetricFamily(family_class):  # type: ignore[misc, valid-type]
            def __init__(self, name, description, kind):
                super().__init__(name, description, kind)
                weakref.finalize(self, pb.freed.append, f"family {name}")

            def Metric(self, labels, buckets=None):  # noqa: N802
                metric = super().Metric(labels, buckets)
                weakref.finalize(metric, pb.freed.append, f"metric {self.name}")
                return metric

        self.MetricFamily = MetricFamily


def metrics_of(pb: PbUtils) -> TritonMetrics:
    return TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", ModelInfo("tiny", "", True, 0, "float32", "cpu"))


def test_metrics_kept_past_exit_are_never_freed() -> None:
    pb = PbUtils()
    metrics = metrics_of(pb)
    metrics.keep_past_exit()
    del metrics
    gc.collect()
    assert pb.freed == []


def test_without_it_they_are_freed_with_the_model() -> None:
    pb = PbUtils()
    metrics = metrics_of(pb)
    families = len(metrics._families)
    del metrics
    gc.collect()
    assert sum(entry.startswith("family") for entry in pb.freed) == families > 0
