"""Building runs from short text: workloads (``complex:2.4x``), policies (``pertoken:25``), scaler specs.

Shared by the CLI and the benchmark script, so both name things the same way.

Workloads: ``simple:R`` or ``complex:R`` (Table 4.2 at R requests per second; ``Rx`` means R times one
replica's saturation rate for that query type), or ``trace:PATH`` (a CSV trace).

Policies: ``request:T`` and ``pertoken:T`` (the live autoscaler's policy at threshold T ms), ``planner``
or ``planner:H`` (the project's own, each replica planned at H of the capacity learned, as the live
``scaler.planner.headroom``), ``planner-v1`` (:mod:`nlgsim.planner_v1`), ``fixed:N`` (N replicas, no
autoscaler) and, in the
trace protocol, the reference ``lagged:S`` (:mod:`nlgsim.lagged`: the oracle's counts held S seconds). Options
after a space change the scaler's spec for that policy alone: ``wN`` its ``time_window`` and ``sN`` its
``stabilization_window``, in seconds (``pertoken:25 w60``, ``planner s600``). A run is named by its text
exactly as written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from autoscaler.config import PlannerSpec, ScalerSpec, parse_scaler, to_dict
from nlgsim.anchors import ANCHORS
from nlgsim.capacity import saturation_rate
from nlgsim.lagged import NAME as LAGGED
from nlgsim.lagged import OracleCounts, lagged_policy
from nlgsim.planner import PlannerConfig, planner_policy
from nlgsim.planner_v1 import NAME as PLANNER_V1
from nlgsim.planner_v1 import planner_v1_policy
from nlgsim.policy import Policy, hpa_policy
from nlgsim.profile import EngineProfile
from nlgsim.results import SLO
from nlgsim.workload import (
    QUERY_TYPES,
    FleetScale,
    LengthMap,
    MappingCounts,
    Request,
    grouped,
    load_trace,
    thesis_requests,
)


@dataclass(frozen=True)
class Workload:
    name: str
    requests: list[Request]
    description: str
    mapping: str = ""
    """How a trace's lengths were fitted into the context (empty for a synthetic workload)."""
    changes: MappingCounts | None = None


def parse_workload(
    text: str,
    profile: EngineProfile,
    *,
    count: int = 2000,
    duration: float | None = None,
    seed: int = 0,
    start: float = 0.0,
    speed: float = 1.0,
    lengths: str = "refuse",
    ramp: float = 0.0,
    scale: FleetScale | None = None,
    time_unit: str = "s",
    group_s: float = 0.0,
) -> Workload:
    """``scale`` (a trace only) multiplies its rate: :class:`nlgsim.workload.FleetScale`; ``group_s`` gathers
    a trace's arrivals into groups (:func:`nlgsim.workload.grouped`)."""
    kind, _, arg = text.partition(":")
    scale = scale or FleetScale()
    reshaped = [f"--scale {scale.factor}"] * (scale.factor != 1) + ["--day"] * (scale.day is not None)
    reshaped += [f"--group {group_s:g}"] * bool(group_s)
    if reshaped and kind != "trace":
        verb = "applies" if len(reshaped) == 1 else "apply"
        raise ValueError(f"{' and '.join(reshaped)} {verb} to a trace (--workload trace:PATH), not {text!r}")
    if not (math.isfinite(group_s) and group_s >= 0):
        raise ValueError(f"--group {group_s!r}: must be a finite number of seconds >= 0 (0: arrivals as they are)")
    if kind in QUERY_TYPES:
        query = QUERY_TYPES[kind]
        if not arg:
            raise ValueError(f"--workload {text!r}: give a rate, e.g. {kind}:10 (req/s) or {kind}:2.4x")
        capacity = saturation_rate(profile, thesis_requests(query, 1.0, 64, seed))
        rate = float(arg[:-1]) * capacity if arg.endswith("x") else float(arg)
        how = f"{rate / capacity:.2f}x one replica's saturation rate of {capacity:.2f} req/s"
        n = int(rate * duration) if duration is not None else count
        reqs = thesis_requests(query, rate, n, seed, ramp)
        if ramp:
            how += f", rising linearly from 0 over the first {ramp:g} s"
        return Workload(
            kind, reqs, f"{kind} queries (Table 4.2), Poisson {rate:.2f} req/s ({how}), {n} requests"
        )
    if kind == "trace" and arg:
        trace = load_trace(
            arg, LengthMap.parse(lengths, profile.max_context), start=start, duration=duration, speed=speed,
            time_unit=time_unit,
        )  # fmt: skip
        requests = grouped(scale.apply(trace.requests), group_s)
        n = len(requests)
        span = requests[-1].arrival if requests else 0.0
        groups = f", arrivals gathered at one instant every {group_s:g} s" if group_s else ""
        desc = (
            f"trace {trace.name} {scale.describe()}{groups}: {n} requests over {span:.0f} s; lengths: "
            f"{trace.mapping}: {trace.changes.describe()}"
        )
        name = f"{trace.name}{scale.label}" + (f" grouped {group_s:g} s" if group_s else "")
        return Workload(name, requests, desc, trace.mapping, trace.changes)
    raise ValueError(
        f"--workload {text!r}: use simple:RATE, complex:RATE (RATE in req/s or like 2.4x) or trace:PATH"
    )


def scaler_spec(config: Mapping[str, Any] | None, overrides: Sequence[str] = ()) -> ScalerSpec:
    """A ``scaler`` spec from an autoscaler YAML document (or its ``scaler`` part) and overrides.

    Overrides are ``key=value`` with dotted keys (``scale_up.max_pods=2``) and YAML values
    (``signals=[{metric: ttft_p99, target: 2000}]``).
    """
    data: dict[str, Any] = dict(config.get("scaler", config)) if config else {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: write KEY=VALUE, e.g. threshold=30")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(value)
    return parse_scaler(data)


#: Policy options: the letter, the scaler key it sets.
POLICY_OPTIONS = {"w": "time_window", "s": "stabilization_window"}


def planner_config(
    profile: EngineProfile,
    requests: Sequence[Request],
    slo: SLO,
    loop_interval: float,
    startup_s: float | None,
    settings: PlannerSpec | None = None,
    **overrides: Any,
) -> PlannerConfig:
    """The planner's settings for a workload: the SLO the run is judged by, the lead time from the start-up
    (and a round), the workload's mean lengths until the simulated pods' counters have measured them, and
    ``headroom`` from the scaler's ``planner`` settings (``settings``: the live defaults unless ``--set
    planner.headroom=...``), so that what a user would set with ``helm upgrade --set`` is what runs."""
    live = settings or PlannerSpec()
    prompt = sum(r.prompt_tokens for r in requests) / max(len(requests), 1)
    outputs = [n for r in requests for n in r.output_tokens]
    output = sum(outputs) / max(len(outputs), 1)
    startup = profile.startup_s if startup_s is None else startup_s
    long_output = sorted(outputs)[int(0.95 * (len(outputs) - 1))] if outputs else 1.0
    cfg = PlannerConfig(
        profile=profile,
        slo=slo,
        lead_s=(live.startup or startup) + loop_interval,
        headroom=live.headroom,
        prompt_tokens=prompt,
        output_tokens=output,
        long_output_tokens=long_output,
    )
    return replace(cfg, **overrides)


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ValueError(f"{what}: {text!r} is not a number > 0")
    return value


def policy_spec(text: str, base: ScalerSpec) -> ScalerSpec:
    """``base`` with the options after the policy's name (``w60``, ``s600``) applied."""
    _, *options = text.split()
    changes: dict[str, float] = {}
    for option in options:
        key = POLICY_OPTIONS.get(option[:1])
        if key is None:
            raise ValueError(
                f"--policy {text!r}: option {option!r} is not one of "
                + ", ".join(f"{k}N ({v})" for k, v in POLICY_OPTIONS.items())
            )
        changes[key] = _number(option[1:], f"--policy {text!r}")
    return parse_scaler({**to_dict(base), **changes}) if changes else base


def build_policy(
    text: str, base: ScalerSpec, planner: PlannerConfig | None = None, oracle: OracleCounts | None = None
) -> tuple[Policy | None, int]:
    """A policy (``None`` for fixed replicas) and the replicas to start with; ``lagged:H`` replays
    ``oracle``, the counts the trace protocol's oracle found."""
    head = text.split()[0] if text.split() else ""
    kind, _, arg = head.partition(":")
    spec = policy_spec(text, base)
    if kind in ("request", "pertoken"):
        if not arg:
            raise ValueError(f"--policy {text!r}: give a threshold in ms, e.g. {kind}:25")
        spec = parse_scaler({**to_dict(spec), "type": kind, "threshold": _number(arg, f"--policy {text!r}")})
        return hpa_policy(spec, text, planner.profile if planner else None), max(spec.min_deployment_count, 1)
    if kind in ("planner", PLANNER_V1):
        if planner is None:
            raise ValueError(f"--policy {kind} needs the planner's settings")
        if kind == PLANNER_V1:
            if arg:
                raise ValueError(f"--policy {text!r}: {PLANNER_V1} runs at the settings it shipped with")
            return planner_v1_policy(spec, planner, text), max(spec.min_deployment_count, 1)
        if arg:
            headroom = _number(arg, f"--policy {text!r}: the headroom")
            if headroom > 1:
                raise ValueError(f"--policy {text!r}: the headroom is a share of the capacity, in (0, 1]")
            planner = replace(planner, headroom=headroom)
        return planner_policy(spec, planner, text), max(spec.min_deployment_count, 1)
    if kind in ANCHORS and not arg:
        return ANCHORS[kind](spec, text, planner), max(spec.min_deployment_count, 1)
    if kind == LAGGED:
        hold = _number(arg, f"--policy {text!r}: the seconds a need is held, e.g. lagged:300")
        if oracle is None:
            raise ValueError(
                f"--policy {text!r} replays the oracle's count of each interval: run it with --protocol trace"
            )
        return lagged_policy(spec, text, hold, oracle), max(spec.min_deployment_count, 1)
    if kind == "fixed":
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"--policy {text!r}: give a replica count >= 1, e.g. fixed:3")
        return None, int(arg)
    raise ValueError(
        f"--policy {text!r}: use request:MS, pertoken:MS, planner[:H], planner-v1, fixed:N, lagged:S (--protocol "
        f"trace) or an anchor: {', '.join(ANCHORS)}"
    )
