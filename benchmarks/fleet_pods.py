"""A fake fleet of Triton pods for the fleet benchmark: one process serving many pods' ``/metrics``,
pod ``i`` on its own loopback address (127.0.0.0/8 is all loopback) and one shared port.

Each pod's page is a real tritonserver scrape (``fleet_round_triton_scrape.txt``: tritonserver 2.51
with this repository's model, written by ``python -m benchmarks.fleet_round --capture-triton``) with
the families the autoscaler reads given live values, plus the per-GPU families Triton adds on a GPU
node; so a page has Triton's size and shape, and most of its lines are ones the autoscaler does not
read. Every scrape is of a page advanced by a few requests' worth of traffic since the last, so each
round's windows move.

Run by :mod:`benchmarks.fleet_round`: ``python -m benchmarks.fleet_pods --pods N --port P``; prints
``ready`` once every address listens and serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import sys
from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final

from autoscaler.collect.exposition import (
    COUNTER_SAMPLES,
    GAUGE_FAMILIES,
    HISTOGRAM_FAMILIES,
    parse_exposition,
)

TRITON_SCRAPE: Final = Path(__file__).with_name("fleet_round_triton_scrape.txt")
MODEL: Final = "gpt2"
HISTOGRAMS: Final = tuple(HISTOGRAM_FAMILIES)
GAUGES: Final = tuple(GAUGE_FAMILIES)
#: The gauges a pod's traffic moves; the others the autoscaler reads (one per model instance) keep the
#: captured page's lines, labels and all.
LIVE_GAUGES: Final = ("nlg_requests_running", "nlg_requests_waiting", "nlg_kv_cache_usage_ratio")
COUNTERS: Final = tuple(COUNTER_SAMPLES)
FINISH_REASONS: Final = ("error", "cancelled", "length", "stop")
# Triton's per-GPU families (one GPU per pod, as the chart requests), in its format.
GPU_FAMILIES: Final = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes"),
    ("nv_gpu_power_usage", "GPU power usage in watts"),
    ("nv_gpu_power_limit", "GPU power management limit in watts"),
    ("nv_energy_consumption", "GPU energy consumption in joules since the Triton Server started"),
)


#: The fleet yields the CPU to the autoscaler: pods make their pages on their own machines, so their
#: work should not be charged to the autoscaler's round.
NICE: Final = 10


def address(i: int) -> str:
    """Pod ``i``'s loopback address: 127.0.0.2 onwards, 250 to a /24."""
    return f"127.0.{i // 250}.{i % 250 + 2}"


def _family_of(sample: str) -> str | None:
    """The modeled family a sample name belongs to, or None."""
    for part in ("_bucket", "_sum", "_count"):
        if sample.endswith(part) and sample.removesuffix(part) in HISTOGRAMS:
            return sample.removesuffix(part)
    return sample if sample in LIVE_GAUGES or sample in COUNTERS else None


def _template() -> list[tuple[str, str]]:
    """The captured page as ``("text", lines)`` and ``("family", name)`` parts, with ``("gpu", "")``
    after Triton's CPU families, where a GPU node's page has its GPU families."""
    parts: list[tuple[str, str]] = []
    for line in TRITON_SCRAPE.read_text().splitlines(keepends=True):
        family = _family_of(line.partition("{")[0])
        if family is not None:
            if parts[-1:] != [("family", family)]:
                parts.append(("family", family))
        elif parts and parts[-1][0] == "text":
            parts[-1] = ("text", parts[-1][1] + line)
        else:
            parts.append(("text", line))
        if line.startswith("nv_cpu_memory_used_bytes "):
            parts.append(("gpu", ""))
    return parts


_TEMPLATE: Final = _template()
_BOUNDS: Final = {
    family: tuple(le for le, _ in parse_exposition(TRITON_SCRAPE.read_text(), MODEL).histograms[short].buckets)
    for family, short in HISTOGRAM_FAMILIES.items()
}
_LABELS: Final = f'model="{MODEL}",version="1"'


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


class FleetPod:
    """One pod's counters, moved by :meth:`advance`; :meth:`exposition` is its page."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.rng = rng
        self.counts = {family: [0] * len(bounds) for family, bounds in _BOUNDS.items()}
        self.sums = dict.fromkeys(HISTOGRAMS, 0.0)
        self.prompt_tokens = self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.gauges = dict.fromkeys(LIVE_GAUGES, 0.0)
        uuid = f"GPU-{index:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        self.gpu = "".join(
            f'# HELP {name} {doc}\n# TYPE {name} gauge\n{name}{{gpu_uuid="{uuid}"}} {rng.random() * 100:.1f}\n'
            for name, doc in GPU_FAMILIES
        )

    def _observe(self, family: str, seconds: float, n: int = 1) -> None:
        self.counts[family][bisect_left(_BOUNDS[family], seconds)] += n
        self.sums[family] += seconds * n

    def advance(self) -> None:
        """A few requests finished since the last scrape (about 2 per second for a 5 s round)."""
        rng = self.rng
        for _ in range(rng.randrange(0, 20)):
            output = rng.randrange(16, 256)
            ttft = rng.lognormvariate(math.log(0.15), 0.5)
            per_token = rng.lognormvariate(math.log(0.025), 0.3)
            self._observe("nlg_time_to_first_token_seconds", ttft)
            self._observe("nlg_time_per_output_token_seconds", per_token)
            self._observe("nlg_request_latency_seconds", ttft + per_token * output)
            self._observe("nlg_inter_token_latency_seconds", per_token, output - 1)
            self.prompt_tokens += rng.randrange(16, 512)
            self.generation_tokens += output
            self.finished[rng.choice(("length", "length", "stop"))] += 1
        self.gauges["nlg_requests_running"] = float(rng.randrange(0, 24))
        self.gauges["nlg_requests_waiting"] = float(rng.randrange(0, 3))
        self.gauges["nlg_kv_cache_usage_ratio"] = round(rng.random() * 2**20) / 2**20

    def _histogram(self, family: str) -> str:
        lines = [
            f"{family}_count{{{_LABELS}}} {sum(self.counts[family])}",
            f"{family}_sum{{{_LABELS}}} {self.sums[family]!r}",
        ]
        cumulative = 0
        for le, c in zip(_BOUNDS[family], self.counts[family], strict=True):
            cumulative += c
            lines.append(f'{family}_bucket{{{_LABELS},le="{_le(le)}"}} {cumulative}')
        return "\n".join(lines) + "\n"

    def _family(self, name: str) -> str:
        if name in HISTOGRAMS:
            return self._histogram(name)
        if name in LIVE_GAUGES:
            instance = f'model="{MODEL}",model_instance="{MODEL}_0_0",version="1"'
            return f"{name}{{{instance}}} {self.gauges[name]!r}\n"
        if name == "nlg_requests_finished_total":
            return "".join(f'{name}{{finish_reason="{r}",{_LABELS}}} {n}\n' for r, n in self.finished.items())
        value = self.prompt_tokens if name == "nlg_prompt_tokens_total" else self.generation_tokens
        return f"{name}{{{_LABELS}}} {value}\n"

    def exposition(self) -> str:
        parts: dict[str, Callable[[str], str]] = {
            "text": lambda text: text,
            "family": self._family,
            "gpu": lambda _: self.gpu,
        }
        return "".join(parts[kind](value) for kind, value in _TEMPLATE)


class _PodProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, GET only: every request gets the pod's next page. The page is made ahead,
    while the server would otherwise idle (a real pod makes its page on its own machine, not in the
    one process that serves the whole fleet here)."""

    def __init__(self, pod: FleetPod) -> None:
        self.pod = pod
        self.buffer = b""
        self.page: bytes | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        asyncio.get_running_loop().call_soon(self._make_ahead)

    def _next_page(self) -> bytes:
        self.pod.advance()
        body = self.pod.exposition().encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body

    def _make_ahead(self) -> None:
        if self.page is None:
            self.page = self._next_page()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            _, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            page, self.page = self.page or self._next_page(), None
            self.transport.write(page)
            asyncio.get_running_loop().call_soon(self._make_ahead)


async def serve(pods: int, port: int, seed: int) -> None:
    loop = asyncio.get_running_loop()
    servers = []
    for i in range(pods):
        pod = FleetPod(i, random.Random(seed * 1_000_003 + i))
        servers.append(await loop.create_server(partial(_PodProtocol, pod), address(i), port, backlog=16))
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the benchmark closes our stdin
    for server in servers:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nice", type=int, default=NICE, help="niceness added to this process")
    args = parser.parse_args()
    os.nice(args.nice)
    asyncio.run(serve(args.pods, args.port, args.seed))


if __name__ == "__main__":
    main()
