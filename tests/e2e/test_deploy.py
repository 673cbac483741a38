"""The deployment examples in docs/deploy/ are run here, as far as this
machine can: the shared config serves three nodes on MinIO behind the nginx
example (one render for a metatile asked through nginx); the Kubernetes
Indexed Job's and the Slurm array's seed commands run once per index, as the
schedulers would run them, and together seed the whole plan once. The
manifests are checked for the fields that make this work (no Kubernetes API
server here to validate against)."""
import concurrent.futures
import os
import re
import subprocess
import uuid

import pytest
import yaml

from conftest import ROOT, free_port, nginx_running, s3_bucket, serving
from test_cluster import BUCKET, get, leases_left, metric, renders, wait_until

DEPLOY = ROOT / "docs" / "deploy"
SOURCE = ROOT / "data" / "shadedrelief-5400.tif"


@pytest.fixture
def aws_env(s3, monkeypatch):
    """The S3 client settings the examples take from the environment."""
    env = {"AWS_ACCESS_KEY_ID": s3["key"], "AWS_SECRET_ACCESS_KEY": s3["secret"],
           "AWS_ENDPOINT": s3["endpoint"], "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s3_bucket(s3, BUCKET)
    return env


def shared_config(tmp_path, prefix):
    """docs/deploy/tessera.yaml pointed at a MinIO prefix and the repo's raster."""
    text = (DEPLOY / "tessera.yaml").read_text()
    assert "s3://tiles/tessera" in text and "/data/shadedrelief.tif" in text
    text = text.replace("s3://tiles/tessera", f"s3://{BUCKET}/{prefix}")
    text = text.replace("/data/shadedrelief.tif", str(SOURCE))
    path = tmp_path / "tessera.yaml"
    path.write_text(text)
    return path


def test_nginx_example_in_front_of_three_nodes_renders_a_metatile_once(aws_env, tmp_path, tmp_path_factory):
    prefix = f"deploy-{uuid.uuid4().hex[:8]}"
    config = shared_config(tmp_path, prefix)
    with serving(tmp_path_factory, "--config", str(config)) as n1, \
            serving(tmp_path_factory, "--config", str(config)) as n2, \
            serving(tmp_path_factory, "--config", str(config)) as n3:
        conf = (DEPLOY / "nginx.conf").read_text()
        for i, node in enumerate((n1, n2, n3), start=1):
            assert f"tessera-{i}:8080" in conf
            conf = conf.replace(f"tessera-{i}:8080", node.url.removeprefix("http://"))
        port = free_port()
        assert "listen 80;" in conf
        conf = conf.replace("listen 80;", f"listen 127.0.0.1:{port};")
        with nginx_running(tmp_path, conf):
            class Front:
                url = f"http://127.0.0.1:{port}"
            wait_until(lambda: _answers(Front), 10, "nginx answering")
            paths = [f"/tiles/relief/WebMercatorQuad/4/{x}/{y}.png" for x in range(8, 12) for y in range(4, 8)]
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                answers = list(pool.map(lambda i: get(Front, paths[i % 16]), range(160)))
            assert [a[0] for a in answers] == [200] * 160
            assert sum(renders(n) for n in (n1, n2, n3)) == 1
            served = [metric(n, "tessera_tile_requests_total", layer="relief") for n in (n1, n2, n3)]
            assert sum(served) == 160 and min(served) > 0, f"every node served: {served}"
            assert get(Front, "/admin/reload")[0] == 403, "the admin API stays behind nginx"


def _answers(server):
    try:
        return get(server, "/health", timeout=2)[0] == 200
    except OSError:
        return False


def load_manifests(name):
    return list(yaml.safe_load_all((DEPLOY / name).read_text()))


def test_kubernetes_deployment_runs_three_serving_nodes_of_the_shared_config():
    docs = {d["kind"]: d for d in load_manifests("k8s-deployment.yaml")}
    assert set(docs) == {"ConfigMap", "Deployment", "Service"}
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] == 3
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:2] == ["tessera", "serve"]
    config = container["command"][container["command"].index("--config") + 1]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert config == f"{mount}/tessera.yaml" and "tessera.yaml" in docs["ConfigMap"]["data"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["ports"][0]["containerPort"] == docs["Service"]["spec"]["ports"][0]["targetPort"] == 8080
    assert spec["selector"]["matchLabels"] == pod.get("labels", spec["template"]["metadata"]["labels"])


def run_shards(commands, envs):
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env}) for cmd, env in zip(commands, envs)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return outs


def assert_whole_plan_once(outs, config):
    planned = [int(re.search(r"in (\d+) metatiles", err).group(1)) for _, err in outs]
    rendered = [int(re.search(r"\((\d+) rendered", out).group(1)) for out, _ in outs]
    whole = 1 + 1 + 1 + 4 + 16  # zoom 0..4 in 4 x 4 metatiles
    assert sum(planned) == whole and sum(rendered) == whole, (planned, rendered)
    r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
                        "--zoom", "0..4"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "(0 rendered" in r.stdout, r.stdout + r.stderr


def test_kubernetes_indexed_job_seeds_the_plan_once_across_its_indexes(aws_env, s3, tmp_path):
    [job] = load_manifests("k8s-seed-job.yaml")
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    shard = command[command.index("--shard") + 1]
    n = int(shard.removeprefix("auto/"))
    assert shard == f"auto/{n}" and job["spec"]["completions"] == n
    config = shared_config(tmp_path, f"k8s-{uuid.uuid4().hex[:8]}")
    cmd = [os.environ["TESSERA_BIN"] if c == "tessera" else c for c in command]
    cmd[cmd.index("--config") + 1] = str(config)
    cmd[cmd.index("--zoom") + 1] = "0..4"
    outs = run_shards([cmd] * n, [{"JOB_COMPLETION_INDEX": str(i)} for i in range(n)])
    assert_whole_plan_once(outs, config)


def test_slurm_array_script_seeds_the_plan_once_across_its_tasks(aws_env, s3, tmp_path):
    script = DEPLOY / "slurm-seed.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    first, last = map(int, re.search(r"#SBATCH --array=(\d+)-(\d+)", text).groups())
    n = int(re.search(r"--shard auto/(\d+)", text).group(1))
    assert (first, last + 1) == (0, n), "a 0-based array of N tasks"
    prefix = f"slurm-{uuid.uuid4().hex[:8]}"
    config = shared_config(tmp_path, prefix)
    env = {"TESSERA": os.environ["TESSERA_BIN"], "TESSERA_CONFIG": str(config), "TESSERA_ZOOM": "0..4",
           "SLURM_CPUS_PER_TASK": "1"}
    outs = run_shards([["bash", str(script)]] * n, [{**env, "SLURM_ARRAY_TASK_ID": str(i)} for i in range(n)])
    assert_whole_plan_once(outs, config)
    assert leases_left(s3_bucket(s3, BUCKET), prefix) == [], "every shard deleted its leases"
