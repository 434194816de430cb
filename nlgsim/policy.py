"""Policies the simulator can drive: the live autoscaler's (:mod:`autoscaler.policy`), one code.

A policy is a pure ``decide(window, spec, state, now) -> (Decision, state)`` plus a way to make its
first state; the state has ``with_replicas(n)``, which the loop calls each round with the replicas
the Deployment has. ``hpa_policy`` gives ``request`` and ``pertoken``; ``nlgsim.planner`` the planner.
"""

from __future__ import annotations

from autoscaler.policy import DecideFn, Policy, hpa_policy

__all__ = ["DecideFn", "Policy", "hpa_policy"]
