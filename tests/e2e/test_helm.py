"""The Helm chart (packaging/helm/tessera): `helm lint` passes with each
value set, `helm template` renders manifests that parse, with the pieces a
cluster needs (probes on /ready and /health, the configuration mounted and
accepted by `tessera check --no-open`, secrets by reference only, the seed
Indexed Job's shards matching its completions, the HPA and ServiceMonitor
on request), the values checked by the chart's schema, and the book's
Helm values render. No Kubernetes API server
runs here: what is checked is what `helm` and tessera can check."""
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT

CHART = ROOT / "packaging" / "helm" / "tessera"
BOOK = ROOT / "docs" / "book" / "src"

VALUE_SETS = {
    "defaults": "",
    "cluster": """
replicaCount: 3
env: { AWS_REGION: us-east-1, AWS_ENDPOINT: "http://minio.storage:9000", AWS_ALLOW_HTTP: "true" }
secretEnv:
  AWS_ACCESS_KEY_ID: { secret: tessera-s3, key: access-key }
  AWS_SECRET_ACCESS_KEY: { secret: tessera-s3, key: secret-key }
  TESSERA_ADMIN_TOKEN: { secret: tessera-admin, key: token }
envFromSecrets: [tessera-keys]
config:
  admin: { token: "${TESSERA_ADMIN_TOKEN}" }
  stores:
    shared: { type: object, url: s3://tiles/tessera }
  cluster: { leases: true }
  layers:
    - name: relief
      source: { path: /data/shadedrelief.tif }
      cache: { store: shared }
data: { existingClaim: tessera-data }
autoscaling: { enabled: true, minReplicas: 3, maxReplicas: 12 }
serviceMonitor: { enabled: true, labels: { release: prometheus } }
seed: { enabled: true, layer: relief, zoom: "0..10", shards: 8, parallelism: 4,
        extraArgs: ["--bbox", "5.7,49.4,6.6,50.2"] }
""",
    "existing-config": """
existingConfigMap: my-tessera-config
service: { type: LoadBalancer, port: 8080 }
""",
}


@pytest.fixture(scope="module")
def helm():
    path = os.environ.get("TESSERA_HELM_BIN")
    if not path:
        pytest.fail("TESSERA_HELM_BIN is not set: run the tests through scripts/test (scripts/helm builds it)",
                    pytrace=False)
    return path


def render(helm, tmp_path, values, name="t"):
    """The chart rendered with `values` (YAML text): its manifests by kind."""
    path = tmp_path / f"{name}-values.yaml"
    path.write_text(values)
    lint = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run([helm, "template", name, str(CHART), "-f", str(path), "--namespace", "maps"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_kind = {}
    for d in docs:
        assert {"apiVersion", "kind", "metadata"} <= d.keys(), d
        by_kind.setdefault(d["kind"], []).append(d)
    return by_kind


def container(manifest):
    [c] = manifest["spec"]["template"]["spec"]["containers"]
    return c


def check_config(tmp_path, text):
    path = tmp_path / "tessera.yaml"
    path.write_text(text)
    env = {**os.environ, **{v: "x" * 40 for v in re.findall(r"\$\{(\w+)\}", text)}}
    out = subprocess.run([os.environ["TESSERA_BIN"], "check", "--no-open", str(path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr


def test_the_defaults_render_a_deployment_a_service_and_its_config(helm, tmp_path):
    kinds = render(helm, tmp_path, VALUE_SETS["defaults"])
    assert set(kinds) == {"ConfigMap", "Deployment", "Service"}, set(kinds)
    [deployment] = kinds["Deployment"]
    c = container(deployment)
    assert c["command"] == ["tessera"] and c["args"][:3] == ["serve", "--config", "/etc/tessera/tessera.yaml"]
    assert c["args"][-2:] == ["--listen", "0.0.0.0:8080"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/etc/tessera", "/tmp", "/var/cache/tessera"} <= mounts
    [service] = kinds["Service"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= service["spec"]["selector"].items()
    [config] = kinds["ConfigMap"]
    check_config(tmp_path, config["data"]["tessera.yaml"])


def test_a_cluster_with_secrets_seeding_autoscaling_and_monitoring(helm, tmp_path):
    kinds = render(helm, tmp_path, VALUE_SETS["cluster"])
    assert {"ConfigMap", "Deployment", "Service", "Job", "HorizontalPodAutoscaler", "ServiceMonitor"} <= set(kinds)
    [deployment] = kinds["Deployment"]
    assert "replicas" not in deployment["spec"], "the HPA sets the replicas"
    c = container(deployment)
    env = {e["name"]: e for e in c["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "tessera-s3", "key": "access-key"}
    assert env["AWS_REGION"]["value"] == "us-east-1"
    assert c["envFrom"] == [{"secretRef": {"name": "tessera-keys"}}]
    assert "Secret" not in kinds, "secrets by reference only: the chart makes none"
    [job] = kinds["Job"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 8 and spec["parallelism"] == 4
    args = container(job)["args"]
    assert args[args.index("--shard") + 1] == "auto/8", "one shard per completion index"
    assert args[args.index("--zoom") + 1] == "0..10" and args[-2:] == ["--bbox", "5.7,49.4,6.6,50.2"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "tessera-data"
    [hpa] = kinds["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    [monitor] = kinds["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [service] = kinds["Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [config] = kinds["ConfigMap"]
    check_config(tmp_path, config["data"]["tessera.yaml"])


def test_an_existing_config_map_is_mounted_instead(helm, tmp_path):
    kinds = render(helm, tmp_path, VALUE_SETS["existing-config"])
    assert "ConfigMap" not in kinds
    [deployment] = kinds["Deployment"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "my-tessera-config"
    assert kinds["Service"][0]["spec"]["type"] == "LoadBalancer"


def test_a_missing_secret_reference_is_refused_by_name(helm, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("secretEnv: { AWS_ACCESS_KEY_ID: { key: access-key } }\n")
    out = subprocess.run([helm, "template", "t", str(CHART), "-f", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "secretEnv.AWS_ACCESS_KEY_ID.secret is required" in out.stderr, out.stderr


def test_the_book_s_helm_values_render(helm, tmp_path):
    """Each YAML block of the book marked `<!-- fragment: helm-values -->`
    lints and renders with the chart."""
    text = "\n".join(p.read_text() for p in sorted(BOOK.glob("*.md")))
    found = re.findall(r"<!-- fragment: helm-values -->\s*\n```yaml\n(.*?)^```", text, re.S | re.M)
    assert found, "the book shows no Helm values"
    for n, block in enumerate(found):
        kinds = render(helm, tmp_path, block, name=f"book{n}")
        assert "Deployment" in kinds
        if "ConfigMap" in kinds:
            check_config(tmp_path, kinds["ConfigMap"][0]["data"]["tessera.yaml"])


def test_a_misspelt_value_is_refused_by_the_chart_s_schema(helm, tmp_path):
    """values.schema.json: a value the chart does not have, or of the wrong
    shape, fails `helm template` naming it (not silently ignored)."""
    for values, named in (("replicas: 3\n", "replicas"), ("seed: { zoom: all }\n", "/seed/zoom"),
                          ("service: { type: Ingress }\n", "/service/type")):
        path = tmp_path / "typo.yaml"
        path.write_text(values)
        out = subprocess.run([helm, "template", "t", str(CHART), "-f", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and named in out.stderr, (values, out.stderr)
