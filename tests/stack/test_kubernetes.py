"""The Kubernetes manifests: consistent with each other and with the daemon they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bubblewatch.daemon.config.file import load_config
from bubblewatch.daemon.config.listen import parse_listen_address

from .dashboard_util import ROOT

K8S = ROOT / "packaging" / "kubernetes"


def _docs() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[doc["kind"]] = doc
    return out


@pytest.fixture(scope="module")
def docs():
    return _docs()


@pytest.fixture(scope="module")
def pod(docs):
    return docs["DaemonSet"]["spec"]["template"]["spec"]


def test_kustomization_lists_every_manifest(docs):
    listed = set(docs["Kustomization"]["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_host_access(pod):
    assert pod["hostPID"] is True  # engine discovery through /proc
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    assert "nvidia.com/gpu.present" in pod["nodeSelector"]
    assert pod["automountServiceAccountToken"] is False


def test_does_not_reserve_gpus(pod):
    """Requesting nvidia.com/gpu would take GPUs away from the serving engine."""
    res = pod["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in {**res.get("requests", {}), **res.get("limits", {})}
    assert {"cpu", "memory"} <= set(res["requests"]) and "memory" in res["limits"]


def test_least_privilege(pod):
    sc = pod["containers"][0]["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["capabilities"]["add"] == ["SYS_PTRACE"]


def test_probes_and_ports_match_the_daemon(pod, docs, tmp_path):
    (c,) = pod["containers"]
    (port,) = c["ports"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    assert c["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] == port["name"]
    config = _load_shipped_config(docs, tmp_path)
    assert parse_listen_address(config.web.listen_address)[1] == port["containerPort"]
    svc = docs["Service"]["spec"]
    (sport,) = svc["ports"]
    assert sport["targetPort"] == port["name"] and sport["port"] == port["containerPort"]


def _load_shipped_config(docs, tmp_path: Path):
    cm = docs["ConfigMap"]
    (name,) = cm["data"]
    path = tmp_path / name
    path.write_text(cm["data"][name])
    return load_config(path, env={})


def test_configmap_is_a_valid_daemon_config(docs, pod, tmp_path):
    config = _load_shipped_config(docs, tmp_path)
    (c,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    (cm_name,) = docs["ConfigMap"]["data"]
    assert f"--config={mounts['config']}/{cm_name}" in c["args"]
    assert str(config.alerting.state_dir) == mounts["state"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]


def test_service_and_servicemonitor_select_the_pods(docs):
    pod_labels = docs["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    svc = docs["Service"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    sm = docs["ServiceMonitor"]["spec"]
    assert sm["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = sm["endpoints"]
    assert endpoint["port"] == svc["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    # The alert rules expect job="bubblewatch": the Operator names the job after the Service.
    assert svc["metadata"]["name"] == "bubblewatch" and "jobLabel" not in sm
