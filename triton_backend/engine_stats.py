"""The engine's load at one moment, as plain data (no torch): what the scheduler's `make_stats` reports
and the metrics adapter exports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineStats:
    running_requests: int  # admitted: prefilling or decoding
    waiting_requests: int  # queued for admission, preempted ones included
    kv_pages_used: int
    kv_pages_total: int
    preemptions: int  # sequences preempted since start
    length_predictions: int = 0  # requests given a predicted output length, since start
    length_underestimates: int = 0  # choices that generated more than their prediction, since start
    prefilling_requests: int = 0  # of the running ones, those whose prompt is still going into the cache

    @property
    def kv_usage(self) -> float:
        return self.kv_pages_used / self.kv_pages_total
