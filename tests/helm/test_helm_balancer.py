"""The balancer the chart puts in front of Triton (balancer.kind): what it renders, and that HAProxy
accepts the configuration. tests/helm/test_balancer_haproxy.py runs that configuration in front of
real tritonservers."""

from __future__ import annotations

import hashlib
import re
import subprocess

import pytest
import yaml
from balancer_testkit import balancer_config, check_config, haproxy_binary, keyword, sections
from helm_testkit import NAMESPACE, RELEASE, HelmError, container, pod_spec

BASE = f"{RELEASE}-nlg-serving"
GATEWAY = ("--set", "balancer.kind=inferencePool", "--set", "balancer.inferencePool.gateway.name=inference-gateway",
           "--set", "balancer.inferencePool.endpointPicker.name=gpt2-epp")  # fmt: skip


def labels_of(deployment):
    return deployment["spec"]["template"]["metadata"]["labels"]


def test_clients_service_selects_the_balancer_on_the_ports_clients_use(render, chart_values):
    rendered = render()
    service = rendered.one("Service", "-triton")
    balancer = rendered.one("Deployment", "-balancer")
    assert service["spec"]["selector"].items() <= labels_of(balancer).items()
    assert not service["spec"]["selector"].items() <= labels_of(rendered.one("Deployment", "-triton")).items()
    haproxy = container(pod_spec(balancer), "haproxy")
    named = {p["name"]: p["containerPort"] for p in haproxy["ports"]}
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    # Clients keep the Service's name and ports; the metrics port is the balancer's own.
    assert ports == {
        "http": (chart_values["service"]["ports"]["http"], "http"),
        "grpc": (chart_values["service"]["ports"]["grpc"], "grpc"),
        "metrics": (named["metrics"], "metrics"),
    }
    assert named == chart_values["balancer"]["ports"]
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "balancer"


def test_the_headless_service_lists_the_triton_pods_on_their_own_ports(render):
    rendered = render("--set", "triton.ports.grpc=9001")
    pods = rendered.one("Service", "-triton-pods")
    assert pods["spec"]["clusterIP"] == "None"
    assert not pods["spec"].get("publishNotReadyAddresses", False), "only ready pods may be resolved"
    triton = container(pod_spec(rendered.one("Deployment", "-triton")), "triton")
    container_ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert container_ports["grpc"] == 9001 and "--grpc-port=9001" in triton["args"]
    assert {p["name"]: p["port"] for p in pods["spec"]["ports"]} == container_ports
    assert pods["spec"]["selector"].items() <= labels_of(rendered.one("Deployment", "-triton")).items()


def test_haproxy_accepts_the_rendered_configuration(render):
    for args in ((), ("--set", "balancer.dns.nameservers={10.96.0.10:53,10.96.0.11:53}")):
        done = check_config(balancer_config(render(*args)))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Configuration file is valid" in done.stdout + done.stderr


def test_haproxy_refuses_a_broken_configuration(render):
    """The check above can fail: HAProxy rejects a keyword it does not know."""
    broken = balancer_config(render()).replace("balance leastconn", "balance fewest-streams", 1)
    assert check_config(broken).returncode != 0


def test_each_stream_goes_to_the_ready_pod_with_the_fewest_in_flight(render, chart_values):
    rendered = render()
    cfg = sections(balancer_config(rendered))
    triton = container(pod_spec(rendered.one("Deployment", "-triton")), "triton")
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    fqdn = f"{BASE}-triton-pods.{NAMESPACE}.svc.{chart_values['balancer']['dns']['clusterDomain']}"
    slots = int(keyword(cfg["backend triton-grpc"], "server-template")[0][1])
    # gRPC over HTTP/2 on both sides, HTTP/1.1 to Triton's HTTP port; one slot per pod the DNS lists.
    assert keyword(cfg["frontend grpc"], "bind") == [[f":{chart_values['balancer']['ports']['grpc']}", "proto", "h2"]]
    assert keyword(cfg["frontend http"], "bind") == [[f":{chart_values['balancer']['ports']['http']}"]]
    assert keyword(cfg["backend triton-grpc"], "server-template") == [
        ["triton", str(slots), f"{fqdn}:{ports['grpc']}", "proto", "h2"]
    ]
    assert keyword(cfg["backend triton-http"], "server-template") == [["triton", str(slots), f"{fqdn}:{ports['http']}"]]
    for backend in ("backend triton-grpc", "backend triton-http"):
        assert keyword(cfg[backend], "balance") == [["leastconn"]]
    # The health check is Triton's readiness probe, on its HTTP port, over HTTP/1.1.
    probe = triton["readinessProbe"]["httpGet"]
    defaults = cfg["defaults"]
    assert keyword(defaults, "http-check connect") == [["port", str(ports[probe["port"]]), "proto", "h1"]]
    [send] = keyword(defaults, "http-check send")
    assert send[send.index("uri") + 1] == probe["path"]
    assert keyword(defaults, "http-check expect") == [["status", "200"]]
    [server] = keyword(defaults, "default-server")
    check = chart_values["balancer"]["healthCheck"]
    assert server[server.index("inter") + 1] == f"{check['interval']}s"
    assert server[server.index("fall") + 1] == str(check["fall"])
    assert server[server.index("resolvers") + 1] == "cluster"
    assert keyword(cfg["resolvers cluster"], "timeout resolve") == [[f"{chart_values['balancer']['dns']['interval']}s"]]
    assert keyword(cfg["resolvers cluster"], "parse-resolv-conf") == [[]]


@pytest.mark.parametrize("most", [1, 4, 7, 30])
def test_every_pod_the_scaler_may_run_has_a_slot_during_a_rolling_update(render, most):
    cfg = sections(balancer_config(render("--set", f"autoscaler.policy.max_deployment_count={most}")))
    surge = -(-most // 4)  # the Deployment's default maxSurge, 25% rounded up
    for backend in ("backend triton-grpc", "backend triton-http"):
        [template] = keyword(cfg[backend], "server-template")
        assert int(template[1]) == most + surge


def test_nameservers_replace_the_pods_resolv_conf(render):
    cfg = sections(balancer_config(render("--set", "balancer.dns.nameservers={10.96.0.10:53,10.96.0.11:53}")))
    resolvers = cfg["resolvers cluster"]
    assert keyword(resolvers, "nameserver") == [["dns0", "10.96.0.10:53"], ["dns1", "10.96.0.11:53"]]
    assert not keyword(resolvers, "parse-resolv-conf")


def test_the_balancer_pod_meets_the_restricted_pod_security_standard(render):
    """Pod Security Standards, restricted profile: every control it names, for the balancer's pod."""
    spec = pod_spec(render().one("Deployment", "-balancer"))
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 99  # the image's user haproxy
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all("hostPath" not in v for v in spec.get("volumes", []))
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        security = c["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["readOnlyRootFilesystem"] is True
        assert not security.get("privileged", False)
        for port in c["ports"]:
            assert port["containerPort"] > 1024, "a non-root process cannot bind below 1024"
            assert "hostPort" not in port
    assert spec["automountServiceAccountToken"] is False


def test_the_balancer_has_replicas_a_disruption_budget_and_probes(render, chart_values):
    rendered = render()
    balancer = rendered.one("Deployment", "-balancer")
    assert balancer["spec"]["replicas"] == chart_values["balancer"]["replicas"] >= 2
    pdb = rendered.one("PodDisruptionBudget", "-balancer")
    assert pdb["spec"]["selector"]["matchLabels"] == balancer["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    haproxy = container(pod_spec(balancer), "haproxy")
    cfg = sections(balancer_config(rendered))
    [monitor] = keyword(cfg["frontend stats"], "monitor-uri")
    for probe in ("readinessProbe", "livenessProbe"):
        assert haproxy[probe]["httpGet"] == {"path": monitor[0], "port": "metrics"}
    assert "prometheus-exporter" in " ".join(cfg["frontend stats"])
    assert (
        render("--set", "balancer.podDisruptionBudget.enabled=false").maybe("PodDisruptionBudget", "-balancer") is None
    )


def test_a_stop_lets_open_streams_finish_and_a_changed_config_rolls_the_pods(render, chart_values):
    rendered = render()
    spec = pod_spec(rendered.one("Deployment", "-balancer"))
    drain = chart_values["triton"]["drain"]
    cfg = sections(balancer_config(rendered))
    assert keyword(cfg["global"], "hard-stop-after") == [[f"{drain['maxStreamSeconds']}s"]]
    pre_stop = container(spec, "haproxy")["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[-1] == f"sleep {drain['preStopSeconds']}"
    assert spec["terminationGracePeriodSeconds"] > drain["preStopSeconds"] + drain["maxStreamSeconds"]

    def checksum(*args):
        return render(*args).one("Deployment", "-balancer")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    digest = hashlib.sha256(rendered.config_map_file("-balancer", "haproxy.cfg").rstrip("\n").encode()).hexdigest()
    assert checksum() == digest
    assert checksum("--set", "balancer.dns.interval=2") != digest
    assert checksum("--set", "autoscaler.policy.threshold=30") == digest


def test_monitoring_scrapes_the_balancer_and_every_triton_pod(render):
    monitor = render("--set", "monitoring.enabled=true").one("ServiceMonitor")
    [components] = [
        e["values"] for e in monitor["spec"]["selector"]["matchExpressions"] if e["key"].endswith("component")
    ]
    assert set(components) == {"triton", "autoscaler", "balancer"}


def test_switched_off_the_clients_service_selects_the_triton_pods(render):
    rendered = render("--set", "balancer.kind=none")
    assert rendered.maybe("Deployment", "-balancer") is None
    assert rendered.maybe("Service", "-triton-pods") is None
    assert rendered.maybe("ConfigMap", "-balancer") is None
    service = rendered.one("Service", "-triton")
    assert service["spec"]["selector"].items() <= labels_of(rendered.one("Deployment", "-triton")).items()
    config = yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml"))
    assert config["source"]["service"] == service["metadata"]["name"]
    assert config["actuator"]["triton_url"] == f"http://{BASE}-triton.{NAMESPACE}.svc:8000"


def test_the_inference_pool_routes_the_models_http_endpoints_from_a_gateway(render):
    rendered = render(*GATEWAY)
    assert rendered.maybe("Deployment", "-balancer") is None
    pool = rendered.one("InferencePool", "-triton")
    triton = rendered.one("Deployment", "-triton")
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels_of(triton).items()
    http = next(p["containerPort"] for p in container(pod_spec(triton), "triton")["ports"] if p["name"] == "http")
    assert pool["spec"]["targetPorts"] == [{"number": http}]
    assert pool["spec"]["endpointPickerRef"] == {
        "kind": "Service", "name": "gpt2-epp", "port": {"number": 9002}, "failureMode": "FailClose",
    }  # fmt: skip
    route = rendered.one("HTTPRoute", "-triton")
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"}
    ]
    [rule] = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v2/models/gpt2/"}}]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}
    ]
    # The Service stays as without a balancer: the autoscaler finds the pods through it.
    config = yaml.safe_load(rendered.config_map_file("-autoscaler", "config.yaml"))
    assert config["source"]["service"] == rendered.one("Service", "-triton")["metadata"]["name"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--set", "balancer.kind=inferencePool"), "balancer.inferencePool.gateway.name: the Gateway the HTTPRoute"),
        (GATEWAY[:4], "balancer.inferencePool.endpointPicker.name: the endpoint picker's Service is required"),
        (
            ("--set", "balancer.kind=envoy"),
            "at '/balancer/kind': value must be one of 'haproxy', 'inferencePool', 'none'",
        ),
        (("--set", "balancer.ports.grpc=81"), "at '/balancer/ports/grpc': minimum: got 81, want 1,025"),
        (
            ("--set", "balancer.dns.nameservers={kube-dns}"),
            "at '/balancer/dns/nameservers/0': 'kube-dns' does not match",
        ),
        (("--set", "balancer.healthCheck.fall=0"), "at '/balancer/healthCheck/fall': minimum: got 0, want 1"),
    ],
    ids=["no-gateway", "no-endpoint-picker", "unknown-kind", "privileged-port", "nameserver-without-port", "no-fall"],
)
def test_bad_balancer_values_are_refused_naming_the_key(helm, args, message):
    with pytest.raises(HelmError, match=re.escape(message)):
        helm.template(*args)


def test_the_tested_haproxy_is_the_branch_of_the_charts_image(chart_values):
    """The test runs Debian's haproxy; the chart deploys the official image of the same major.minor."""
    version = subprocess.run([haproxy_binary(), "-v"], capture_output=True, text=True, check=True).stdout
    tested = re.search(r"HAProxy version (\d+\.\d+)\.", version)
    assert tested, version
    deployed = chart_values["balancer"]["image"]["tag"]
    assert deployed.startswith(f"{tested.group(1)}."), (deployed, tested.group(1))
