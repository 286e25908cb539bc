"""deploy/kubernetes: the base and each overlay render with `kubectl kustomize` and validate
against the pinned Kubernetes schemas (kubernetes-validate) and the ServiceMonitor and
PrometheusRule schemas in schemas/; the DaemonSet's probes reach the endpoints the agent serves,
its config passes `gpuagent config check`, and the PrometheusRule is config/prometheus/alerts.yml."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of kubernetes-validate, the test extra)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the test extra)")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZATIONS = ["base", "overlays/influxdb", "overlays/prometheus"]
# The Kubernetes versions the manifests are checked against: the oldest and newest that the
# main clouds still support at the time of writing, and one between.
KUBERNETES_VERSIONS = ["1.29.0", "1.32.0", "1.35.0"]
CR_SCHEMAS = {"ServiceMonitor": "servicemonitor.json", "PrometheusRule": "prometheusrule.json"}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (1.24+, whose kustomize is v4.5+)")
    out = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"Kustomize Version: v(\d+)\.(\d+)", out)
    if not found or (int(found.group(1)), int(found.group(2))) < (4, 5):
        pytest.skip(
            f"kubectl's kustomize is older than v4.5 (the manifests use `labels:` and `patches:`; kubectl 1.24+ has it): {out.strip()[:200]!r}"
        )
    return kubectl


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    kubectl = _kubectl()
    out = {}
    for name in KUSTOMIZATIONS:
        done = subprocess.run(
            [kubectl, "kustomize", str(ROOT / "deploy/kubernetes" / name)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"
        out[name] = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return out


def by_kind(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
@pytest.mark.slow
def test_renders_and_validates_against_pinned_schemas(rendered, name):
    docs = rendered[name]
    checked = set()
    for doc in docs:
        kind = doc["kind"]
        if kind in CR_SCHEMAS:
            schema = json.loads((Path(__file__).parent / "schemas" / CR_SCHEMAS[kind]).read_text())
            jsonschema.validate(doc, schema)
        else:
            for version in KUBERNETES_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)  # strict: unknown fields are errors
        checked.add(kind)
    expected = {"Namespace", "ServiceAccount", "ConfigMap", "Service", "DaemonSet"}
    if name != "overlays/influxdb":  # no prometheus-operator there
        expected |= {"ServiceMonitor", "PrometheusRule"}
    if name == "overlays/prometheus":
        expected |= {"Role", "RoleBinding"}
    assert checked == expected


def test_a_wrong_field_is_caught_by_the_validation(rendered):
    """The checks above can fail: a typo in the DaemonSet and in the ServiceMonitor is refused."""
    ds = json.loads(json.dumps(by_kind(rendered["base"], "DaemonSet")))
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBERNETES_VERSIONS[0], strict=True)
    sm = json.loads(json.dumps(by_kind(rendered["base"], "ServiceMonitor")))
    sm["spec"]["endpoints"][0]["interval"] = "30 seconds"
    schema = json.loads((Path(__file__).parent / "schemas/servicemonitor.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sm, schema)


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
@pytest.mark.slow
def test_daemonset_for_gpu_nodes_with_probes_on_the_agents_endpoints(rendered, name, tmp_path):
    docs = rendered[name]
    ds = by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert pod["hostPID"] is True
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"nvidia.com/gpu.present"} <= {e["key"] for t in terms for e in t["matchExpressions"]}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["pod-resources"]["readOnly"] is True
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert volumes["state"]["hostPath"]["path"] == mounts["state"]["mountPath"] == "/var/lib/gpuagent"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]) == {"requests", "limits"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (port,) = container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == port["name"]

    # The ConfigMap the pod mounts: a config the agent accepts, whose /metrics listener (and so the
    # probes) is on the container's port, with the spool on the hostPath.
    cm = by_kind(docs, "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]
    assert mounts["config"]["mountPath"] == "/etc/gpuagent" and container["args"][-1] == "/etc/gpuagent/gpuagent.toml"
    config = tmp_path / "gpuagent.toml"
    config.write_text(cm["data"]["gpuagent.toml"])
    names = set(re.findall(r"\$\{(\w+)", config.read_text()))
    assert names <= set(env), f"the config names variables the pod does not set: {names - set(env)}"
    environ = {"PATH": "/usr/bin:/bin", **{n: "https://x.example:8086" if "URL" in n else "x" for n in names}}
    done = subprocess.run(
        [sys.executable, "-m", "gpuagent", "config", "show", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )
    assert done.returncode == 0, done.stderr
    shown = tomllib.loads(done.stdout)
    assert shown["sinks"]["prometheus"]["listen"] == f"0.0.0.0:{port['containerPort']}"
    assert shown["agent"]["state_dir"] == "/var/lib/gpuagent"


def test_service_and_servicemonitor_reach_the_pods(rendered):
    docs = rendered["overlays/prometheus"]
    ds, svc, sm = by_kind(docs, "DaemonSet"), by_kind(docs, "Service"), by_kind(docs, "ServiceMonitor")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    # GpuagentDown in alerts.yml expects job="gpuagent": the ServiceMonitor's jobLabel gives that.
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "gpuagent"
    assert sm["metadata"]["labels"]["release"] == by_kind(docs, "PrometheusRule")["metadata"]["labels"]["release"]


def test_prometheusrule_is_the_shipped_alerts(rendered):
    done = subprocess.run([sys.executable, str(ROOT / "scripts/sync-alert-rules.py"), "--check"], timeout=60)
    assert done.returncode == 0, "prometheusrule.yaml is stale: run scripts/sync-alert-rules.py"
    alerts = yaml.safe_load((ROOT / "config/prometheus/alerts.yml").read_text())
    rule = by_kind(rendered["base"], "PrometheusRule")
    assert rule["spec"]["groups"] == alerts["groups"]
    assert len(alerts["groups"]) >= 1 and all(g["rules"] for g in alerts["groups"])
