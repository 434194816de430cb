"""Actuators: what carries a decision out. Each reads the current replicas and sets new ones.

This package owns changing the world and nothing else. Implementations of :class:`Actuator`:

- :class:`~autoscaler.actuate.kubernetes.DeploymentScaler`: a Deployment's replica count through the
  official ``kubernetes`` client (horizontal scaling, the thesis's mechanism);
- :class:`~autoscaler.actuate.triton.TritonInstanceScaler`: a model's instance count through Triton's
  model-control API (in-place scaling on one node, the seeds' Sponge/Biscale);
- :class:`RecordingActuator`: changes nothing and remembers what it was asked (``actuator.kind: none``,
  a dry run that logs decisions).

Manual changes: an actuator remembers what it last set (the Kubernetes one on the Deployment, where a
replica that takes the Lease over finds it; the Triton one in memory, :class:`LastSet`). When it
observes something else, a person (or another controller) changed the target:
:meth:`Actuator.observe` says so in :attr:`Observed.external`, the loop logs it, takes the observed
count as current and decides from there; it does not snap back to its own last value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ActuationError(RuntimeError):
    """The target could not be read or changed; the message names it and says why."""


class Deferred(RuntimeError):
    """The actuator will not make this change yet (the message says why); the next round asks again.

    Not an error: nothing failed, the target keeps its replicas and the decision stands.
    """


@dataclass(frozen=True)
class Observed:
    """The target's replicas now; ``external`` when they differ from what this actuator last set."""

    replicas: int
    external: bool = False
    previous: int | None = None


class Actuator(Protocol):
    def observe(self, target: str) -> Observed:
        """Reads the target's current replicas."""
        ...

    def scale(self, target: str, replicas: int, expected: int) -> int:
        """Sets ``replicas`` if the target still has ``expected``; returns the replicas it now has.

        When the target changed under us (it no longer has ``expected``), nothing is written and the
        observed count is returned: the next round decides from it.
        """
        ...

    def close(self) -> None:
        ...


class LastSet:
    """What an actuator last set per target, to tell its own changes from a person's."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def check(self, target: str, replicas: int) -> Observed:
        previous = self._last.get(target)
        self._last[target] = replicas
        if previous is None or previous == replicas:
            return Observed(replicas)
        return Observed(replicas, external=True, previous=previous)

    def remember(self, target: str, replicas: int) -> None:
        self._last[target] = replicas


class RecordingActuator:
    """Changes nothing; each target "has" what it was last set to (starting at ``initial``)."""

    def __init__(self, initial: int = 1) -> None:
        self.initial = initial
        self.replicas: dict[str, int] = {}

    def observe(self, target: str) -> Observed:
        return Observed(self.replicas.get(target, self.initial))

    def scale(self, target: str, replicas: int, expected: int) -> int:
        self.replicas[target] = replicas
        return replicas

    def close(self) -> None:
        """Nothing to release."""
