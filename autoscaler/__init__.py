"""Autoscaler for NLG serving on Triton: scales on per-token latency (Cho, 2022) the way HPA scales.

The pipeline, one module per stage: :mod:`autoscaler.collect` (metric sources) ->
:mod:`autoscaler.aggregate` (windowed statistics) -> :mod:`autoscaler.decide` (pure policies) ->
:mod:`autoscaler.actuate` (Kubernetes Deployment scale, Triton instance count). Around it:
:mod:`autoscaler.config` (the YAML contract), :mod:`autoscaler.loop` (the control loop's round, the
only code that reads the clock), :mod:`autoscaler.targets` (the registry of targets the round acts
on, the API's kept by :mod:`autoscaler.target_store`: memory or a ConfigMap every replica reads),
:mod:`autoscaler.api` (management REST API), :mod:`autoscaler.telemetry`
(the autoscaler's own metrics), :mod:`autoscaler.leader` (Lease election) and :mod:`autoscaler.cli`.
It imports neither the engine (``triton_backend``) nor the simulator (``nlgsim``); the demo that runs
it beside tritonserver is the package ``nlg_demo`` (the layers are contracts in ``pyproject.toml``).
"""

__version__ = "0.1.0"
