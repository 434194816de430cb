"""Values that turn on what the chart's defaults leave off: the variants every manifest test renders."""

from __future__ import annotations

from typing import Any

# Each variant turns on templates the defaults leave off; ids name what they exercise.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "keda": {"scaling": {"mode": "keda"}},
    "keda-signals": {
        "scaling": {"mode": "keda"},
        "autoscaler": {
            "policy": {
                "type": "request",
                "threshold": 2000,
                "signals": [
                    {"metric": "ttft_p99", "target": 2000},
                    {"metric": "waiting_per_replica", "target": 4},
                    {"metric": "kv_usage", "target": 0.9},
                    {"metric": "pertoken_p90", "target": 30},
                ],
            }
        },
    },
    "hpa-pods": {"scaling": {"mode": "hpa"}},
    "hpa-external": {"scaling": {"mode": "hpa", "hpa": {"metricType": "External"}}},
    "service-monitor": {"monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "pod-monitor-keda": {"monitoring": {"enabled": True, "kind": "PodMonitor"}, "scaling": {"mode": "keda"}},
    "weights-pvc": {"weights": {"source": "pvc", "pvc": {"claimName": "gpt2-xl", "subPath": "gpt2-xl"}}},
    "weights-init": {
        "weights": {
            "source": "initContainer",
            "initContainer": {"image": {"repository": "registry.example/gpt2-xl-weights", "tag": "1"}},
        }
    },
    "package-in-image": {
        "package": {"delivery": "image", "modelRepository": "/opt/nlg/model_repository"},
        "triton": {"image": {"repository": "registry.example/nlg-triton", "tag": "0.1.0", "suffix": ""}},
    },
    "autoscaler-minimal-rbac": {
        "autoscaler": {
            "source": {"kind": "prometheus"},
            "actuator": {"kind": "none"},
            "leader_election": {"enabled": False},
            "api": {"port": 0},
            "metrics": {"port": 0},
        }
    },
    "autoscaler-triton-actuator": {"autoscaler": {"actuator": {"kind": "triton"}}},
    "balancer-off": {"balancer": {"kind": "none"}},
    "balancer-nameservers-monitored": {
        "balancer": {"dns": {"nameservers": ["10.96.0.10:53"]}, "podDisruptionBudget": {"enabled": False}},
        "monitoring": {"enabled": True},
    },
    "inference-pool": {
        "balancer": {
            "kind": "inferencePool",
            "inferencePool": {
                "gateway": {"name": "inference-gateway", "namespace": "gateways", "sectionName": "http"},
                "endpointPicker": {"name": "gpt2-epp"},
            },
        }
    },
    "autoscaler-api-token": {"autoscaler": {"api": {"tokenSecret": {"name": "autoscaler-token"}}}},
    "scheduling": {
        "triton": {
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "extraArgs": ["--log-info=true"],
            "extraEnv": [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}],
            "podAnnotations": {"example.com/team": "nlg"},
        },
        "model": {"settings": {"dtype": "float16", "max_num_seqs": 32}},
        "imagePullSecrets": [{"name": "ngc"}],
        "dashboard": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
    },
}


# --- every choice the schema offers -------------------------------------------------------------------

#: What a choice needs besides itself to render (the chart refuses it alone, naming the key).
COMPANIONS: dict[tuple[str, Any], dict[str, Any]] = {
    ("weights.source", "pvc"): VARIANTS["weights-pvc"],
    ("weights.source", "initContainer"): VARIANTS["weights-init"],
    ("autoscaler.policy.type", "planner"): {"autoscaler": {"plannerProfile": {"json": "{}"}}},
    ("balancer.kind", "inferencePool"): VARIANTS["inference-pool"],
}
#: Keys whose choices together decide which pods and containers exist: rendered in every combination.
STRUCTURAL = ("scaling.mode", "package.delivery", "weights.source")


def nested(key: str, value: Any) -> dict[str, Any]:
    """``nested("a.b", 1) == {"a": {"b": 1}}``."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return dict(value)


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Values files applied in order, as `helm -f a -f b` merges them (maps merge, the rest replaces)."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            both = isinstance(value, dict) and isinstance(out.get(key), dict)
            out[key] = merged(out[key], value) if both else value
    return out


def schema_choices(schema: dict[str, Any], prefix: str = "") -> dict[str, list[Any]]:
    """Every key of values.schema.json that takes one of a few values (an enum, a boolean): its choices.
    Keys inside lists and free-form maps are left out (their items are the user's)."""
    found: dict[str, list[Any]] = {}
    for name, sub in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        if "enum" in sub:
            found[key] = list(sub["enum"])
        elif sub.get("type") == "boolean":
            found[key] = [True, False]
        found.update(schema_choices(sub, f"{key}."))
    return found


def with_companions(*choices: tuple[str, Any]) -> dict[str, Any]:
    return merged(*(merged(COMPANIONS.get(choice, {}), nested(*choice)) for choice in choices))


def every_rendering(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Values for each rendering of the chart worth checking, by id: each choice of each enum and
    boolean of the schema on its own, every combination of the STRUCTURAL keys, and VARIANTS."""
    choices = schema_choices(schema)
    found = {f"{key}={value}": with_companions((key, value)) for key, values in choices.items() for value in values}
    combos: list[list[tuple[str, Any]]] = [[]]
    for key in STRUCTURAL:
        combos = [[*combo, (key, value)] for combo in combos for value in choices[key]]
    for combo in combos:
        found[",".join(f"{k}={v}" for k, v in combo)] = with_companions(*combo)
    return {**found, **{f"variant:{name}": values for name, values in VARIANTS.items()}}
