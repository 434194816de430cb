"""What a set of ``networking.k8s.io/v1`` NetworkPolicies lets through, for the chart's tests: whether a
pod may open a connection to another pod's port, as the Kubernetes documentation defines it
(https://kubernetes.io/docs/concepts/services-networking/network-policies/), ingress only.

- A pod is isolated for ingress when a policy of its namespace selects it and lists ``Ingress`` in its
  policyTypes; a pod no such policy selects admits everything.
- An isolated pod admits a connection that any one rule of any selecting policy admits: the rule's
  ``ports`` (none: every port; a named port is the destination container's port of that name,
  protocol TCP unless given) and its ``from`` peers (none or empty: everyone).
- A peer: ``podSelector`` alone selects pods of the policy's namespace; ``namespaceSelector`` alone
  every pod of the namespaces it selects; both, the pods it selects in those namespaces; ``ipBlock``
  addresses (never a pod here). An empty selector selects everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    """A pod as a NetworkPolicy sees it: its labels, namespace (and that namespace's labels), ports."""

    labels: Mapping[str, str]
    namespace: str
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    #: Container port name -> number, to resolve a rule's named ports.
    ports: Mapping[str, int] = field(default_factory=dict)

    def all_namespace_labels(self) -> dict[str, str]:
        """With the label every namespace carries (kubernetes.io/metadata.name, Kubernetes 1.22 on)."""
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: every matchLabels pair and every matchExpression holds."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not held:
            return False
    return True


def _peer_admits(peer: Mapping[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], source.all_namespace_labels())
    else:
        in_namespace = source.namespace == policy_namespace
    return in_namespace and selects(peer.get("podSelector"), source.labels)


def _port_admits(rule_ports: list[Mapping[str, Any]] | None, target: Pod, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    for entry in rule_ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        number = target.ports.get(wanted) if isinstance(wanted, str) else wanted
        end = entry.get("endPort", number)
        if wanted is None or (number is not None and number <= port <= end):
            return True
    return False


def admits(policies: Iterable[Mapping[str, Any]], source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether ``source`` may connect to ``target``'s ``port`` under ``policies`` (of any namespace)."""
    isolating = [
        p for p in policies
        if p.get("metadata", {}).get("namespace", target.namespace) == target.namespace
        and selects(p["spec"].get("podSelector"), target.labels)
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
    ]  # fmt: skip
    if not isolating:
        return True
    for policy in isolating:
        namespace = policy.get("metadata", {}).get("namespace", target.namespace)
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            peer_ok = not peers or any(_peer_admits(peer, source, namespace) for peer in peers)
            if peer_ok and _port_admits(rule.get("ports"), target, port, protocol):
                return True
    return False
