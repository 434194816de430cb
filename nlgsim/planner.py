"""The planner the simulator replays: the live autoscaler's (:mod:`autoscaler.planner`), one code.

The what-if CLI builds its :class:`PlannerConfig` from the trace it replays (``nlgsim.experiment``):
the SLO the report judges by, the lengths it assumes until the simulated pods' counters have
measured them, and the lead time from the profile's start-up.
"""

from __future__ import annotations

from autoscaler.planner import Mix, PlannerConfig, PlannerState, Trial, observe_mix, planner_decide
from autoscaler.policy import planner_policy

__all__ = ["Mix", "PlannerConfig", "PlannerState", "Trial", "observe_mix", "planner_decide", "planner_policy"]
