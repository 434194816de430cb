"""Fleet scale: one control round of the direct source over 100, 300 and 1,000 Triton pods, each stage
timed, and the code it replaced measured on the same samples.

    python -m benchmarks.fleet_round --json benchmarks/results/fleet_round.json --report benchmarks/fleet_round.md
    python -m benchmarks.fleet_round --render benchmarks/results/fleet_round.json    # the report, from results
    python -m benchmarks.fleet_round --capture-triton    # refresh fleet_round_triton_scrape.txt (needs tritonserver)

A fake fleet (:mod:`benchmarks.fleet_pods`, its own process) serves each pod on its own loopback
address. Each round calls what ``DirectSource.read`` calls, in its order, timing each:
``Scraper.scrape`` over the pods, ``parse_exposition`` of each page, ``WindowAggregator.record`` and
``window``; then the ``pertoken`` policy decides. The clock of the windows is simulated (5 s a round), so rounds follow
each other at once and the window fills in ``WARMUP`` rounds. A second pass feeds the same samples
to the reference aggregator and parses the same pages with prometheus-client's parser
(:mod:`benchmarks.reference_window`, :mod:`benchmarks.reference_exposition`), and checks that their
results equal the new code's.

The numbers are in the JSON; the report's prose is :func:`render`'s, from the JSON alone.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import math
import os
import random
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any
from urllib.parse import urlsplit

import httpx

from autoscaler.aggregate import PodSample, WindowAggregator, WindowStats, stale_after
from autoscaler.collect.exposition import parse_exposition
from autoscaler.collect.scrape import CONCURRENCY, Scraper
from autoscaler.config import ScalerSpec, SourceSpec
from autoscaler.policy import build_policy
from benchmarks import fleet_pods, harness
from benchmarks.reference_exposition import reference_parse_exposition
from benchmarks.reference_window import ReferenceWindowAggregator

SIZES = (100, 300, 1000)
ROUNDS = 25
WARMUP = 13  # rounds that fill the 60 s window at 5 s a round, plus the baseline
REFERENCE_ROUNDS = 6  # rounds of the reference pass that are timed (its window costs seconds at 1,000 pods)
INTERVAL = 5.0  # the chart's loop.interval
#: The clock of the timed rounds (any origin; the pods report from their own).
START = 1_000_000.0
MEASURED_FILES = (
    "autoscaler",
    "benchmarks/fleet_pods.py",
    "benchmarks/fleet_round.py",
    "benchmarks/reference_exposition.py",
    "benchmarks/reference_window.py",
)


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 3), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


class Fleet:
    """The fake fleet's process: ``pods`` pods on one port, stopped on exit."""

    def __init__(self, pods: int, seed: int) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        command = [sys.executable, "-m", "benchmarks.fleet_pods", "--pods", str(pods), "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--seed", str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=harness.REPO
        )

    def __enter__(self) -> Fleet:
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            self.__exit__()
            raise RuntimeError(f"the fleet did not start (exit status {self.process.poll()})")
        return self

    def targets(self, pods: int) -> dict[str, str]:
        return {f"pod-{i}": f"http://{fleet_pods.address(i)}:{self.port}/metrics" for i in range(pods)}

    def __exit__(self, *exc: object) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float, float]:
    """``fn(*args)``, its wall and its CPU milliseconds (the process's: the scrape's threads included)."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn(*args)
    return value, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def parse_all(texts: dict[str, str], parse: Callable[[str, str], PodSample]) -> dict[str, PodSample]:
    return {pod: parse(text, fleet_pods.MODEL) for pod, text in texts.items()}


def record_and_window(
    aggregator: WindowAggregator | ReferenceWindowAggregator, now: float, samples: dict[str, PodSample]
) -> WindowStats:
    aggregator.record(now, samples)
    return aggregator.window(now)


def rounds_of(fleet: Fleet, pods: int, spec: ScalerSpec, timeout: float) -> dict[str, Any]:
    """The timed pass: the round as the service runs it."""
    scraper = Scraper(timeout)
    aggregator = WindowAggregator(spec.time_window, stale_after(INTERVAL, timeout))
    policy = build_policy(spec)
    state = policy.initial(spec.max_deployment_count, START)
    times: dict[str, list[float]] = {}
    missing, decisions = 0, []
    try:
        for r in range(WARMUP + ROUNDS):
            now = START + r * INTERVAL
            scraped, scrape_ms, scrape_cpu = timed(scraper.scrape, fleet.targets(pods))
            samples, parse_ms, parse_cpu = timed(parse_all, scraped.texts, parse_exposition)
            window, aggregate_ms, aggregate_cpu = timed(record_and_window, aggregator, now, samples)
            (decision, state), decide_ms, decide_cpu = timed(policy.decide, window, spec, state, now)
            if r < WARMUP:
                continue
            missing += len(scraped.errors)
            decisions.append(decision.reason)
            stages = {
                "scrape": scrape_ms, "parse": parse_ms, "parse_cpu": parse_cpu, "aggregate": aggregate_ms,
                "aggregate_cpu": aggregate_cpu, "decide": decide_ms, "decide_cpu": decide_cpu,
                "aggregate_decide": aggregate_ms + decide_ms, "aggregate_decide_cpu": aggregate_cpu + decide_cpu,
                "round": scrape_ms + parse_ms + aggregate_ms + decide_ms,
                "round_cpu": scrape_cpu + parse_cpu + aggregate_cpu + decide_cpu, "scrape_cpu": scrape_cpu,
            }  # fmt: skip
            for name, ms in stages.items():
                times.setdefault(name, []).append(ms)
    finally:
        scraper.close()
    return {
        "stages_ms": {name: stats(values) for name, values in times.items()},
        "pods_in_window": window.pods,
        "requests_in_window": window.latency("pertoken").count,
        "scrapes_missed": missing,
        "last_decision": decisions[-1],
    }


def equal_windows(got: WindowStats, want: WindowStats) -> bool:
    """The test's rule (tests/autoscaler/test_incremental_windows.py): counts and quantiles exact,
    means within 1e-9 relative."""

    def plain(w: WindowStats) -> tuple[Any, ...]:
        return w.pods, w.span, dict(w.gauges), dict(w.counters)

    if plain(got) != plain(want):
        return False
    if set(got.latencies) != set(want.latencies):
        return False
    for name, mine in got.latencies.items():
        ref = want.latencies[name]
        exact = [(getattr(mine, s), getattr(ref, s)) for s in ("count", "p50", "p90", "p99")]
        if any(a != b and not (math.isnan(a) and math.isnan(b)) for a, b in exact):
            return False
        both_nan = math.isnan(mine.mean) and math.isnan(ref.mean)
        if not (both_nan or math.isclose(mine.mean, ref.mean, rel_tol=1e-9)):
            return False
    return True


class OtherClientScrape:
    """The pages fetched with another HTTP client (``httpx`` or ``http.client``), one connection per
    pod kept between rounds as the scraper keeps them, on the same number of threads."""

    def __init__(self, client: str, targets: dict[str, str], timeout: float) -> None:
        self._pool = ThreadPoolExecutor(CONCURRENCY)
        if client == "httpx":
            tls = ssl.create_default_context()  # one, as building one reads the CA bundle
            clients = {pod: httpx.Client(timeout=timeout, verify=tls) for pod in targets}
            self._get: Callable[[str, str], str] = lambda pod, url: clients[pod].get(url).raise_for_status().text
            self._open: list[httpx.Client | http.client.HTTPConnection] = list(clients.values())
        else:
            connections = {pod: http.client.HTTPConnection(urlsplit(url).netloc, timeout=timeout)
                           for pod, url in targets.items()}  # fmt: skip

            def get(pod: str, url: str) -> str:
                connection = connections[pod]
                connection.request("GET", urlsplit(url).path, headers={"Accept": "text/plain"})
                return connection.getresponse().read().decode()

            self._get = get
            self._open = list(connections.values())

    def __call__(self, targets: dict[str, str]) -> int:
        return len(list(self._pool.map(self._get, targets, targets.values())))

    def close(self) -> None:
        self._pool.shutdown()
        for connection in self._open:
            connection.close()


def reference_pass(fleet: Fleet, pods: int, spec: ScalerSpec, timeout: float) -> dict[str, Any]:
    """The same kind of rounds, each sample given to both aggregators and each page to both parsers;
    and the pages fetched with httpx too."""
    scraper = Scraper(timeout)
    others = {name: OtherClientScrape(name, fleet.targets(pods), timeout) for name in ("httpx", "http.client")}
    ours = WindowAggregator(spec.time_window, stale_after(INTERVAL, timeout))
    reference = ReferenceWindowAggregator(spec.time_window, stale_after(INTERVAL, timeout))
    times: dict[str, list[float]] = {}
    unequal_windows = unequal_pages = 0
    try:
        for r in range(WARMUP + REFERENCE_ROUNDS):
            now = START + r * INTERVAL
            scraped, scrape_ms, scrape_cpu = timed(scraper.scrape, fleet.targets(pods))
            texts = scraped.texts
            samples, parse_ms, _ = timed(parse_all, texts, parse_exposition)
            if r < WARMUP:
                ours.record(now, samples)
                reference.record(now, samples)
                continue
            gc.collect()  # each of the two starts clean: neither pays for collecting the other's garbage
            got, ours_ms, _ = timed(record_and_window, ours, now, samples)
            gc.collect()
            want, reference_ms, _ = timed(record_and_window, reference, now, samples)
            unequal_windows += not equal_windows(got, want)
            parsed, reference_parse_ms, _ = timed(parse_all, texts, reference_parse_exposition)
            unequal_pages += sum(repr(parsed[p]) != repr(samples[p]) for p in samples)
            for name, ms in (("aggregate", ours_ms), ("reference_aggregate", reference_ms),
                             ("parse", parse_ms), ("reference_parse", reference_parse_ms),
                             ("scrape", scrape_ms), ("scrape_cpu", scrape_cpu)):  # fmt: skip
                times.setdefault(name, []).append(ms)
            for client, fetch in others.items():
                _, wall_ms, cpu_ms = timed(fetch, fleet.targets(pods))
                times.setdefault(f"{client}_scrape", []).append(wall_ms)
                times.setdefault(f"{client}_scrape_cpu", []).append(cpu_ms)
    finally:
        scraper.close()
        for fetch in others.values():
            fetch.close()
    return {"stages_ms": {name: stats(values) for name, values in times.items()},
            "unequal_windows": unequal_windows, "unequal_pages": unequal_pages}  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    spec = ScalerSpec()  # the defaults: pertoken, 60 s window, threshold 25 ms
    timeout = SourceSpec().timeout
    load_before = os.getloadavg()[0]  # what else the machine was doing, for the report
    page = fleet_pods.FleetPod(0, random.Random(0))
    page.advance()
    text = page.exposition()
    read = sum(1 for line in text.splitlines() if line.partition("{")[0] in _read_samples())
    results: dict[str, Any] = {}
    with Fleet(max(args.sizes), args.seed) as fleet:
        for pods in args.sizes:
            print(f"{pods} pods ...", flush=True)
            results[str(pods)] = {
                "round": rounds_of(fleet, pods, spec, timeout),
                "reference": reference_pass(fleet, pods, spec, timeout),
            }
            print(json.dumps(results[str(pods)]["round"]["stages_ms"]), flush=True)
    return {
        "machine": harness.machine(),
        "date": str(date.today()),
        "code": harness.revision(*MEASURED_FILES),
        "setup": {
            "sizes": list(args.sizes),
            "rounds": ROUNDS,
            "warmup": WARMUP,
            "reference_rounds": REFERENCE_ROUNDS,
            "interval_s": INTERVAL,
            "time_window_s": spec.time_window,
            "timeout_s": timeout,
            "concurrency": CONCURRENCY,
            "policy": spec.type,
            "seed": args.seed,
            "page_bytes": len(text.encode()),
            "page_lines": len(text.splitlines()),
            "page_lines_read": read,
            "loadavg_before": round(load_before, 2),
            "nice": os.nice(0),
            "fleet_nice": fleet_pods.NICE,
        },
        "results": results,
    }


def _read_samples() -> set[str]:
    histograms = {f"{f}_{p}" for f in fleet_pods.HISTOGRAMS for p in ("bucket", "sum", "count")}
    return histograms | set(fleet_pods.GAUGES) | set(fleet_pods.COUNTERS)


# --- the report ------------------------------------------------------------------------------------


def per_pod_ms(results: dict[str, Any], stage: str) -> float:
    """The least-squares slope of a stage's median over the fleet sizes: ms per pod."""
    xs = [int(n) for n in results]
    ys: list[float] = [r["round"]["stages_ms"][stage]["median"] for r in results.values()]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def switch_limits(data: dict[str, Any]) -> dict[str, int]:
    """Fleet sizes at which the direct source runs out of time, from the measured slopes: the scrape
    reaches the default ``source.timeout`` (pods past it are cut every round), or the whole round
    half the ``loop.interval`` (its next round would start late under any hiccup)."""
    setup, results = data["setup"], data["results"]
    by_timeout = setup["timeout_s"] * 1000 / per_pod_ms(results, "scrape")
    by_interval = setup["interval_s"] * 1000 / 2 / per_pod_ms(results, "round")
    switch = int(min(by_timeout, by_interval) // 100 * 100)
    return {"by_timeout": int(by_timeout), "by_interval": int(by_interval), "switch": switch}


def _ms(stage: dict[str, float]) -> str:
    return f"{stage['median']:.1f} / {stage['p90']:.1f}"


def render(data: dict[str, Any]) -> str:
    m, setup, results = data["machine"], data["setup"], data["results"]
    largest = str(max(setup["sizes"]))
    top = results[largest]["round"]["stages_ms"]
    agg_decide, whole = top["aggregate_decide"]["median"], top["round"]["median"]
    limits = switch_limits(data)

    def met(value: float, bound: float) -> str:
        return "**met**" if value < bound else "**not met**"

    lines = [
        "# Fleet scale: one direct-source round over 100 to 1,000 pods",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB memory, Python {m['python']}, no GPU; "
        f"the benchmark ran at nice {setup['nice']}, the machine's 1-minute load average just before it was "
        f"{setup['loadavg_before']}. The fake fleet's process shares the {m['cores']} cores with the benchmark's, at "
        f"nice {setup['fleet_nice']} so that the pods' own work yields to the autoscaler's, as it would on the pods' "
        "own machines. "
        f"Measured {data['date']} on {data['code']} with `benchmarks/fleet_round.py` (this report is rendered "
        "from `benchmarks/results/fleet_round.json`).",
        "",
        f"Fleet: `benchmarks/fleet_pods.py` serves every pod on its own loopback address (127.0.0.2 onwards, one "
        f"port). A page is a real tritonserver scrape with this model (`benchmarks/fleet_round_triton_scrape.txt`) "
        f"plus Triton's per-GPU families, the autoscaler's families given live values: {setup['page_bytes']:,} "
        f"bytes, {setup['page_lines']} lines, {setup['page_lines_read']} of them in the families the autoscaler "
        "reads. Each page shows a few more requests than the pod's last.",
        "",
        f"Round: what `DirectSource.read` does, stage by stage, then the `{setup['policy']}` policy's decide: "
        f"`Scraper.scrape` ({setup['concurrency']} at once, {setup['timeout_s']:g} s deadline), `parse_exposition` "
        f"of every page, `WindowAggregator.record` + `window` ({setup['time_window_s']:g} s window, "
        f"{setup['interval_s']:g} s between rounds on a simulated clock). {setup['warmup']} rounds fill the "
        f"window, then {setup['rounds']} are timed. Milliseconds, median / 90th percentile, wall clock.",
        "",
        "| pods | scrape | parse | aggregate | decide | aggregate + decide | whole round | scrapes missed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pods, r in results.items():
        s = r["round"]["stages_ms"]
        lines.append(
            f"| {int(pods):,} | {_ms(s['scrape'])} | {_ms(s['parse'])} | {_ms(s['aggregate'])} | "
            f"{_ms(s['decide'])} | {_ms(s['aggregate_decide'])} | {_ms(s['round'])} | {r['round']['scrapes_missed']} |"
        )
    lines += [
        "",
        "The same rounds' CPU time (the benchmark process's, every thread), medians, ms: what the code costs "
        "whatever else the machine runs. Wall clock above is this plus the time other processes held the cores.",
        "",
        "| pods | scrape | parse | aggregate + decide | whole round |",
        "|---|---|---|---|---|",
    ]
    for pods, r in results.items():
        s = r["round"]["stages_ms"]
        cpu = [f"{s[k]['median']:.1f}" for k in ("scrape_cpu", "parse_cpu", "aggregate_decide_cpu", "round_cpu")]
        lines.append(f"| {int(pods):,} | " + " | ".join(cpu) + " |")
    top_cpu = top["aggregate_decide_cpu"]["median"]
    lines += [
        "",
        f"At {int(largest):,} pods: aggregate + decide {agg_decide:.1f} ms (target under 100 ms: "
        f"{met(agg_decide, 100)}); the whole round, scrape included, {whole:.0f} ms (target under 1,000 ms: "
        f"{met(whole, 1000)}), wall clock; in CPU time aggregate + decide took {top_cpu:.1f} ms. The last "
        f"round's window held {results[largest]['round']['pods_in_window']:,} pods and "
        f"{results[largest]['round']['requests_in_window']:,.0f} requests; its decision: "
        f"`{results[largest]['round']['last_decision']}`.",
        "",
        "## Against the code it replaced",
        "",
        f"A second pass of {setup['reference_rounds']} timed rounds (after the same {setup['warmup']} to fill the "
        "window) gives every round's samples to both aggregators and every page to both parsers: the "
        "reference aggregator (which reduced every held sample at each `window`, `benchmarks/reference_window.py`) "
        "and prometheus-client's text parser over the whole page (the old `parse_exposition`, "
        "`benchmarks/reference_exposition.py`). Medians, ms; "
        "the results are compared by the rule of `tests/autoscaler/test_incremental_windows.py`. Each "
        "aggregator's `record` + `window` is timed after a full garbage collection, so that neither pays for "
        "collecting the other's objects (the reference holds every sample of the window).",
        "",
        "| pods | aggregate, reference | aggregate, incremental | ratio | windows unequal "
        "| parse, prometheus-client | parse, line parser | ratio | pages unequal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pods, r in results.items():
        s = r["reference"]["stages_ms"]
        rw, w, rp, p = (s[k]["median"] for k in ("reference_aggregate", "aggregate", "reference_parse", "parse"))
        lines.append(
            f"| {int(pods):,} | {rw:.1f} | {w:.1f} | {rw / w:.0f}x | {r['reference']['unequal_windows']} | "
            f"{rp:.0f} | {p:.0f} | {rp / p:.1f}x | {r['reference']['unequal_pages']} |"
        )
    lines += [
        "",
        "The scrape's HTTP client, in the same rounds: the scraper's own (`autoscaler/collect/http_get.py`) "
        "against the standard library's `http.client` and httpx, each with one connection per pod kept "
        f"between rounds and {setup['concurrency']} threads. Medians, ms, wall and CPU (the process's, every "
        "thread).",
        "",
        "| pods | scraper wall | scraper CPU | http.client wall | http.client CPU | httpx wall | httpx CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for pods, r in results.items():
        s = r["reference"]["stages_ms"]
        clients = ("", "http.client_", "httpx_")
        cells = [f"{s[f'{c}scrape{kind}']['median']:.0f}" for c in clients for kind in ("", "_cpu")]
        lines.append(f"| {int(pods):,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## When to switch to Prometheus",
        "",
        f"Per pod, from the slopes over the sizes: scrape {per_pod_ms(results, 'scrape'):.2f} ms, the whole "
        f"round {per_pod_ms(results, 'round'):.2f} ms. At that cost the scrape would reach the default "
        f"`source.timeout` ({setup['timeout_s']:g} s) at about {limits['by_timeout']:,} pods, and the round half "
        f"the `loop.interval` ({setup['interval_s']:g} s) at about {limits['by_interval']:,}: on this machine, "
        f"at this load, the direct source keeps up to about **{limits['switch']:,} pods** (an extrapolation "
        f"beyond the {int(largest):,} measured, rounded down to a hundred; a busier node keeps fewer). Beyond, use "
        "`source.kind: prometheus` with the chart's recording rules (docs/autoscaler.md, Fleet scale).",
    ]
    return "\n".join(lines) + "\n"


# --- the captured page -----------------------------------------------------------------------------


def capture_triton() -> None:
    """A real tritonserver's page after three requests (tiny preset: the page is the same for any)."""
    import httpx

    from triton_backend.launch import TritonServer

    with TritonServer(env={"NLG_PRESET": "tiny"}) as server:
        for _ in range(3):
            body = {"text_input": "Once upon a time", "sampling_parameters": json.dumps({"max_tokens": 8})}
            httpx.post(f"http://{server.http_url}/v2/models/gpt2/generate", json=body, timeout=60).raise_for_status()
        fleet_pods.TRITON_SCRAPE.write_text(httpx.get(server.metrics_url, timeout=10).text)


def sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be pod counts separated by commas, got {text!r}") from None
    if len(values) < 2 or not all(1 <= v <= 2000 for v in values):
        raise argparse.ArgumentTypeError(f"must be at least two counts in [1, 2000], got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=sizes, default=SIZES, help="pod counts, e.g. 100,300,1000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capture-triton", action="store_true", help="refresh the captured tritonserver page")
    harness.output_arguments(parser)
    args = parser.parse_args(argv)
    if args.capture_triton:
        capture_triton()
        return 0
    harness.publish(render(harness.results(args, measure)), args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
