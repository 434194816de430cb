"""The model frees its metrics itself at finalize: Triton 2.51's stub, freeing them during its own
teardown, dies of SIGSEGV (a strace of a plain server stopped with streams open showed the stub
"killed by SIGSEGV" before, and an exit of 0 after)."""

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
            def Metric(self, labels, buckets=None):  # noqa: N802
                metric = super().Metric(labels, buckets)
                weakref.finalize(metric, pb.freed.append, f"metric {self.name}")
                return metric

            def __init__(self, name, description, kind):
                super().__init__(name, description, kind)
                weakref.finalize(self, pb.freed.append, f"family {name}")

        self.MetricFamily = MetricFamily


def test_release_frees_every_metric_before_any_family_and_keeps_none():
    pb = PbUtils()
    metrics = TritonMetrics(pb, "gpt2", "1", "gpt2_0_0", ModelInfo("tiny", "", True, 0, "float32", "cpu"))
    families = len(metrics._families)
    metrics.release()
    gc.collect()
    kinds = [entry.split()[0] for entry in pb.freed]
    assert kinds.count("family") == families > 0
    assert kinds.count("metric") >= families  # a family holds one metric or more
    assert kinds == sorted(kinds, key=lambda kind: kind == "family"), pb.freed
    assert not vars(metrics)
