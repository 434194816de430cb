"""A trace-driven discrete-event simulator of GPT-2 replicas on Triton under the project's autoscaler.

Stages, one module each: :mod:`nlgsim.profile` (engine timings, measured by :mod:`nlgsim.profiler`),
:mod:`nlgsim.workload` (Table 4.2 queries, CSV traces), :mod:`nlgsim.replica` (one replica: the
engine's own scheduler on the profile's clock), :mod:`nlgsim.cluster` (pods behind a Service),
:mod:`nlgsim.simulator` (the event loop, which drives the live autoscaler's control loop,
``autoscaler.loop.Controller``, with its clock), :mod:`nlgsim.results` (SLOs, GPU-seconds, timelines),
:mod:`nlgsim.feasibility` (what no replica count serves), :mod:`nlgsim.oracle` (the lower bounds),
:mod:`nlgsim.planner` (the project's own policy), :mod:`nlgsim.protocol`, :mod:`nlgsim.protocol_result`
and :mod:`nlgsim.protocol_tables` (the report's experiments, one command each, their numbers and their
tables), :mod:`nlgsim.sweep`, :mod:`nlgsim.plots`, :mod:`nlgsim.replay` (the same trace against a real
Triton) and :mod:`nlgsim.cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nlgsim.policy import Policy, hpa_policy
    from nlgsim.profile import EngineProfile, load_profile
    from nlgsim.results import SLO, Summary, summarize
    from nlgsim.simulator import RunLog, Scenario, simulate
    from nlgsim.workload import COMPLEX, SIMPLE, LengthMap, Request, load_trace, thesis_requests

# Resolved on first use, so that a submodule that needs little (nlgsim.replay, the load generator a GPU
# machine runs with only the client's packages) does not import the simulator and the autoscaler with it.
_HOMES = {
    "Policy": "nlgsim.policy", "hpa_policy": "nlgsim.policy",
    "EngineProfile": "nlgsim.profile", "load_profile": "nlgsim.profile",
    "SLO": "nlgsim.results", "Summary": "nlgsim.results", "summarize": "nlgsim.results",
    "RunLog": "nlgsim.simulator", "Scenario": "nlgsim.simulator", "simulate": "nlgsim.simulator",
    "COMPLEX": "nlgsim.workload", "SIMPLE": "nlgsim.workload", "LengthMap": "nlgsim.workload",
    "Request": "nlgsim.workload", "load_trace": "nlgsim.workload", "thesis_requests": "nlgsim.workload",
}  # fmt: skip
__all__ = [
    "COMPLEX", "SIMPLE", "SLO", "EngineProfile", "LengthMap", "Policy", "Request", "RunLog", "Scenario",
    "Summary", "hpa_policy", "load_profile", "load_trace", "simulate", "summarize", "thesis_requests",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'nlgsim' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
