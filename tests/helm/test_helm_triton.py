"""The Triton pod: /dev/shm, probes, graceful drain, ports, the model package and the weights."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from helm_testkit import HelmError, container, env_of, pod_spec
from variants import VARIANTS

from triton_backend.settings import DrainBudget

STARTUP_BUDGET_S = 600  # GPT2-XL: read 6 GB of weights, move them to the GPU, warm up


def triton_pod(render, *args, values=None):
    return pod_spec(render(*args, values=values).one("Deployment", "-triton"))


def mounts_by_path(c) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}


def volume(spec, name):
    [found] = [v for v in spec["volumes"] if v["name"] == name]
    return found


def test_dev_shm_is_a_memory_backed_empty_dir(render):
    spec = triton_pod(render)
    name = mounts_by_path(container(spec, "triton"))["/dev/shm"]
    assert volume(spec, name)["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    spec = triton_pod(render, "--set", "triton.shmSize=4Gi")
    assert volume(spec, "dshm")["emptyDir"]["sizeLimit"] == "4Gi"


def test_probes_use_tritons_health_endpoints(render):
    triton = container(triton_pod(render), "triton")
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert triton["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    startup = triton["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= STARTUP_BUDGET_S
    # Liveness only starts after startup succeeded, so a slow load is not a crash loop.
    assert triton["livenessProbe"]["periodSeconds"] * triton["livenessProbe"]["failureThreshold"] >= 30


@pytest.mark.parametrize(
    ("pre_stop", "longest_stream"),
    [(15, 120), (30, 600), (0, 1)],
    ids=["defaults", "long-streams", "no-prestop-short-streams"],
)
def test_drain_and_exit_timeout_follow_the_drain_budget(render, pre_stop, longest_stream):
    values = {"triton": {"drain": {"preStopSeconds": pre_stop, "maxStreamSeconds": longest_stream}}}
    spec = triton_pod(render, values=values)
    triton = container(spec, "triton")
    budget = DrainBudget(longest_stream)
    # preStop keeps the pod serving while it leaves the Service's endpoints...
    assert triton["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/sh", "-c", f"sleep {pre_stop}"]
    # ...then SIGTERM: the model drains for the budget's drain, within tritonserver's exit timeout.
    assert env_of(triton)["NLG_DRAIN_SECONDS"] == str(budget.drain_seconds)
    assert f"--exit-timeout-secs={budget.exit_timeout_seconds}" in triton["args"]
    assert budget.exit_timeout_seconds > budget.drain_seconds > longest_stream
    assert spec["terminationGracePeriodSeconds"] == budget.grace_period_seconds(pre_stop, 15)
    assert spec["terminationGracePeriodSeconds"] > pre_stop + budget.exit_timeout_seconds


def test_the_charts_default_stream_is_the_models(chart_values):
    assert chart_values["triton"]["drain"]["maxStreamSeconds"] == DrainBudget().max_stream_seconds


def test_a_drain_set_by_hand_is_refused_with_the_key_to_set(helm):
    with pytest.raises(HelmError, match="model.settings.drain_seconds: derived from triton.drain.maxStreamSeconds"):
        helm.template(values={"model": {"settings": {"drain_seconds": 5}}})


def test_server_flags_and_ports(render):
    triton = container(triton_pod(render), "triton")
    assert triton["image"] == "nvcr.io/nvidia/tritonserver:24.10-pyt-python-py3"
    assert triton["command"] == ["tritonserver"]
    assert triton["args"][:4] == [
        "--model-repository=/models",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
    ]
    assert {p["name"]: p["containerPort"] for p in triton["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
    }
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1


@pytest.mark.parametrize(("balancer", "suffix"), [("none", "-triton"), ("haproxy", "-triton-pods")])
def test_service_and_pdb_select_the_triton_pods(render, balancer, suffix):
    """Without a balancer the clients' Service selects the pods; with one, the headless Service does."""
    rendered = render("--set", f"balancer.kind={balancer}")
    pod_labels = rendered.one("Deployment", "-triton")["spec"]["template"]["metadata"]["labels"]
    service = rendered.one("Service", suffix)
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "http": (8000, "http"),
        "grpc": (8001, "grpc"),
        "metrics": (8002, "metrics"),
    }
    pdb = rendered.one("PodDisruptionBudget", "-triton")
    assert pdb["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    # maxUnavailable, so a single replica still lets a node drain.
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
    # The autoscaler's pods must not match the Triton selector (they would count as Triton endpoints).
    autoscaler_labels = rendered.one("Deployment", "-autoscaler")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= autoscaler_labels.items()


def test_model_package_is_copied_in_by_an_init_container(render):
    spec = triton_pod(render)
    package = container(spec, "package")
    assert package["image"] == "ghcr.io/nlg-serving/nlg-serving:0.1.0"
    env = env_of(package)
    assert (env["MODEL_REPOSITORY"], env["SITE_PACKAGES"]) == ("/opt/nlg/model_repository", "/opt/nlg/site-packages")
    into = {env["MODEL_REPOSITORY_INTO"]: "model-repository", env["SITE_PACKAGES_INTO"]: "site-packages"}
    assert mounts_by_path(package) == into
    # A mount at (or above) a path the copy reads would hide what the image holds there.
    for mount in into:
        for source in (env["MODEL_REPOSITORY"], env["SITE_PACKAGES"]):
            assert not Path(source).is_relative_to(mount) and not Path(mount).is_relative_to(source)
    triton = container(spec, "triton")
    assert mounts_by_path(triton)["/models"] == "model-repository"
    assert mounts_by_path(triton)["/opt/nlg/site-packages"] == "site-packages"
    assert env_of(triton)["PYTHONPATH"] == "/opt/nlg/site-packages"
    assert volume(spec, "model-repository")["emptyDir"] == {}


@pytest.fixture
def shared_tmp():
    """A directory another user can enter (pytest's own are its user's alone)."""
    path = Path(tempfile.mkdtemp(prefix="nlg-init-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


WEIGHTS_INIT = {"weights": VARIANTS["weights-init"]["weights"]}
#: Per init container: its values, and (source, destination) variables of each copy it makes.
COPIES = {
    "package": ({}, [("MODEL_REPOSITORY", "MODEL_REPOSITORY_INTO"), ("SITE_PACKAGES", "SITE_PACKAGES_INTO")]),
    "weights": (WEIGHTS_INIT, [("WEIGHTS_SOURCE", "NLG_WEIGHTS_PATH")]),
}


@pytest.mark.parametrize("name", COPIES)
def test_an_init_containers_copy_runs_as_a_non_root_user_into_mount_points_it_does_not_own(render, shared_tmp, name):
    """The rendered command, run here: each emptyDir's mount point belongs to root (as the kubelet
    makes it, mode 0777) and the copy runs as another user, as in the restricted pod. Run as root,
    the test takes the user `nobody`; otherwise it runs as itself (the mount points are then its own)."""
    values, copies = COPIES[name]
    init = container(triton_pod(render, values=values), name)
    env = {**env_of(init), "PATH": os.environ["PATH"]}
    for i, (source, into) in enumerate(copies):
        tree = shared_tmp / f"image-{i}"
        (tree / "gpt2" / "1").mkdir(parents=True)
        (tree / "gpt2" / "config.pbtxt").write_text('backend: "python"\n')
        (tree / ".hidden.pth").write_text("")
        os.utime(tree / "gpt2" / "config.pbtxt", (1_000_000, 1_000_000))
        mount = shared_tmp / f"into-{i}"
        mount.mkdir()
        mount.chmod(0o777)
        env.update({source: str(tree), into: str(mount)})
    user = {"user": "nobody", "group": "nogroup"} if os.geteuid() == 0 else {}
    done = subprocess.run(init["command"], env=env, capture_output=True, text=True, timeout=60, **user)
    assert done.returncode == 0, done.stderr
    for _, into in copies:
        copied = Path(env[into])
        assert (copied / "gpt2" / "config.pbtxt").read_text() == 'backend: "python"\n'
        assert (copied / "gpt2" / "1").is_dir() and (copied / ".hidden.pth").exists()
        # Times kept: compiled bytecode in the image stays valid for the sources it was compiled from.
        assert (copied / "gpt2" / "config.pbtxt").stat().st_mtime == 1_000_000
    # A missing source fails the init container, naming the path.
    env[copies[-1][0]] = str(shared_tmp / "nowhere")
    failed = subprocess.run(init["command"], env=env, capture_output=True, text=True, timeout=60, **user)
    assert failed.returncode != 0 and f"no directory {shared_tmp / 'nowhere'}" in failed.stderr


def test_model_package_can_come_with_the_triton_image(render):
    values = {
        "package": {"delivery": "image", "modelRepository": "/srv/models", "sitePackages": ""},
        "triton": {"image": {"repository": "registry.example/nlg-triton", "tag": "0.1.0", "suffix": ""}},
    }
    spec = triton_pod(render, values=values)
    assert "initContainers" not in spec
    triton = container(spec, "triton")
    assert triton["image"] == "registry.example/nlg-triton:0.1.0"
    assert "--model-repository=/srv/models" in triton["args"]
    assert "PYTHONPATH" not in env_of(triton)


def test_model_settings_become_nlg_variables(render):
    values = {"model": {"preset": "gpt2-xl", "settings": {"dtype": "float16", "max_num_seqs": 32}}}
    env = env_of(container(triton_pod(render, values=values), "triton"))
    assert {k: v for k, v in env.items() if k.startswith("NLG_")} == {
        "NLG_PRESET": "gpt2-xl",
        "NLG_DTYPE": "float16",
        "NLG_MAX_NUM_SEQS": "32",
        "NLG_DRAIN_SECONDS": str(DrainBudget().drain_seconds),
    }


WEIGHTS = [
    ("none", {}, None),
    ("pvc", {"source": "pvc", "pvc": {"claimName": "hf-cache"}}, "/weights"),
    (
        "pvc-subpath",
        {"source": "pvc", "pvc": {"claimName": "hf-cache", "subPath": "gpt2-xl"}},
        "/weights/gpt2-xl",
    ),
    (
        "init",
        {"source": "initContainer", "initContainer": {"image": {"repository": "reg.example/w"}}},
        "/weights",
    ),
]


@pytest.mark.parametrize(("weights", "path"), [w[1:] for w in WEIGHTS], ids=[w[0] for w in WEIGHTS])
def test_weights_path_points_at_the_checkpoint(render, weights, path):
    spec = triton_pod(render, values={"weights": weights})
    triton = container(spec, "triton")
    assert env_of(triton).get("NLG_WEIGHTS_PATH") == path
    if path is None:
        assert "/weights" not in mounts_by_path(triton)
        return
    assert mounts_by_path(triton)["/weights"] == "weights"
    assert next(m for m in triton["volumeMounts"] if m["name"] == "weights")["readOnly"] is True
    if weights["source"] == "pvc":
        assert volume(spec, "weights")["persistentVolumeClaim"] == {"claimName": "hf-cache", "readOnly": True}
    else:
        init = container(spec, "weights")
        assert init["image"] == "reg.example/w:latest"
        assert env_of(init)["NLG_WEIGHTS_PATH"] == "/weights"
        assert volume(spec, "weights")["emptyDir"] == {"sizeLimit": "8Gi"}


def test_weights_init_container_runs_a_given_command(render):
    command = ["python", "-m", "fetch_weights", "--to", "/weights"]
    weights = {
        "source": "initContainer",
        "initContainer": {"image": {"repository": "r/w", "tag": "2"}, "command": command},
    }
    init = container(triton_pod(render, values={"weights": weights}), "weights")
    assert init["command"] == command


def test_triton_actuator_turns_on_explicit_model_control(render):
    args = container(triton_pod(render, "--set", "autoscaler.actuator.kind=triton"), "triton")["args"]
    assert "--model-control-mode=explicit" in args
    assert "--load-model=gpt2" in args
    assert "--model-control-mode=explicit" not in container(triton_pod(render), "triton")["args"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"weights": {"source": "pvc"}}, "weights.pvc.claimName is empty with weights.source=pvc"),
        ({"weights": {"source": "initContainer"}}, "weights.initContainer.image.repository is empty"),
        (
            {"package": {"sitePackages": ""}},
            "package.sitePackages is empty with package.delivery=initContainer",
        ),
    ],
    ids=["pvc-without-claim", "init-without-image", "init-without-packages"],
)
def test_incomplete_delivery_settings_are_rejected(helm, values, message):
    with pytest.raises(HelmError, match=message):
        helm.template(values=values)


def test_the_server_runs_with_one_malloc_arena_unless_told_otherwise(render):
    assert env_of(container(triton_pod(render), "triton"))["MALLOC_ARENA_MAX"] == "1"
    values = {"triton": {"mallocArenaMax": None}}
    assert "MALLOC_ARENA_MAX" not in env_of(container(triton_pod(render, values=values), "triton"))
    values = {"triton": {"mallocArenaMax": 2}}
    assert env_of(container(triton_pod(render, values=values), "triton"))["MALLOC_ARENA_MAX"] == "2"
