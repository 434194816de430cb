"""A trace-driven discrete-event simulator of GPT-2 replicas on Triton under the project's autoscaler.

Stages, one module each: :mod:`nlgsim.profile` (engine timings, measured by :mod:`nlgsim.profiler`),
:mod:`nlgsim.workload` (Table 4.2 queries, CSV traces), :mod:`nlgsim.replica` (one continuous-batching
engine), :mod:`nlgsim.cluster` (pods behind a Service), :mod:`nlgsim.simulator` (the event loop, which
drives the live autoscaler's control loop, ``autoscaler.loop.Controller``, with its clock),
:mod:`nlgsim.results` (SLOs, GPU-seconds, timelines), :mod:`nlgsim.feasibility` (what no replica count
serves), :mod:`nlgsim.oracle` (the lower bounds), :mod:`nlgsim.planner` (the project's own policy),
:mod:`nlgsim.protocol`, :mod:`nlgsim.protocol_result` and :mod:`nlgsim.protocol_tables` (the report's
experiments, one command each, their numbers and their tables),
:mod:`nlgsim.sweep`, :mod:`nlgsim.plots`, :mod:`nlgsim.replay` (the same trace against a real Triton)
and :mod:`nlgsim.cli`.
"""

from nlgsim.policy import Policy, hpa_policy
from nlgsim.profile import EngineProfile, load_profile
from nlgsim.results import SLO, Summary, summarize
from nlgsim.simulator import RunLog, Scenario, simulate
from nlgsim.workload import COMPLEX, SIMPLE, LengthMap, Request, load_trace, thesis_requests

__all__ = [
    "COMPLEX", "SIMPLE", "SLO", "EngineProfile", "LengthMap", "Policy", "Request", "RunLog", "Scenario",
    "Summary", "hpa_policy", "load_profile", "load_trace", "simulate", "summarize", "thesis_requests",
]  # fmt: skip
