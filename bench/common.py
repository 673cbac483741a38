"""Helpers shared by the HTTP benchmark harnesses: a tessera process, a
keep-alive load generator, percentiles, /metrics parsing."""
import contextlib
import datetime
import http.client
import os
import platform
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def curl_pass(base, paths, clients=8, timeout=900):
    """Seconds for one curl process to ask every path once, `clients` at a
    time (connections reused: the client costs far less than a server);
    any answer but 200 stops the benchmark."""
    return curl_pass_hits(base, paths, clients, timeout)[0]


def curl_load(port, paths, clients, timeout=900):
    """`run_load` with one curl process (`--parallel` over `clients` reused
    connections) as the client: a C client whose cost beside a server's
    stays small where a Python one takes a share of the cores from a fast
    server. Returns (seconds, latencies_ms, errors, cache_hits)."""
    config = "".join(f'url = "http://127.0.0.1:{port}{p}"\noutput = "/dev/null"\n' for p in paths)
    start = time.perf_counter()
    out = subprocess.run(["curl", "--no-progress-meter", "--parallel", "--parallel-immediate", "--parallel-max",
                          str(clients), "-w", "%{http_code} %{time_total} %{url} %header{x-cache}\\n", "-K", "-"],
                         input=config, capture_output=True, text=True, timeout=timeout).stdout
    seconds = time.perf_counter() - start
    answers = [line.split() for line in out.splitlines() if line.strip()]
    latencies = [float(a[1]) * 1000 for a in answers]
    errors = [(a[2], a[0]) for a in answers if a[0] != "200"]
    if len(answers) != len(paths):
        errors.append(("(missing answers)", f"{len(answers)} of {len(paths)}"))
    return seconds, latencies, errors, sum(1 for a in answers if a[3:] == ["HIT"])


def curl_pass_hits(base, paths, clients=8, timeout=900):
    """`curl_pass`, and how many answers said `X-Cache: HIT`."""
    config = "".join(f'url = "{base}{p}"\noutput = "/dev/null"\n' for p in paths)
    start = time.monotonic()
    out = subprocess.run(["curl", "--no-progress-meter", "--parallel", "--parallel-max", str(clients),
                          "-w", "%{http_code} %header{x-cache}\\n", "-K", "-"], input=config, capture_output=True,
                         text=True, check=True, timeout=timeout).stdout
    took = time.monotonic() - start
    answers = [line.split() for line in out.splitlines() if line.strip()]
    codes = [a[0] for a in answers]
    if len(codes) != len(paths) or set(codes) != {"200"}:
        raise SystemExit(f"a pass on {base} answered {sorted(set(codes))} for {len(codes)} of {len(paths)}")
    return took, sum(1 for a in answers if a[1:] == ["HIT"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {seconds}s")


@contextlib.contextmanager
def tessera(binary, config_text, workdir):
    """Runs `tessera serve` on `config_text`; yields the port."""
    with tessera_process(binary, config_text, workdir) as (port, _):
        yield port


@contextlib.contextmanager
def tessera_process(binary, config_text, workdir):
    """Runs `tessera serve` on `config_text`; yields (port, process)."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    config = Path(workdir) / "tessera.yaml"
    config.write_text(config_text)
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TESSERA_LOG": "warn"})
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def mapproxy_config(layer, cache, url, upstream_layers, tiles_dir, supported_srs, transparent=False):
    """MapProxy's YAML: one layer over one file cache of 4x4 metatiles (an
    8-pixel buffer, PNG) on GLOBAL_WEBMERCATOR, filled from the WMS at `url`."""
    req = f'url: "{url}", layers: {upstream_layers}' + (", transparent: true" if transparent else "")
    return f"""
services:
  tms:
    use_grid_names: true
layers:
  - name: {layer}
    title: {layer}
    sources: [{cache}]
caches:
  {cache}:
    grids: [GLOBAL_WEBMERCATOR]
    sources: [mapserver]
    meta_size: [4, 4]
    meta_buffer: 8
    format: image/png
    cache: {{ type: file, directory: {tiles_dir} }}
sources:
  mapserver:
    type: wms
    req: {{ {req} }}
    supported_srs: {supported_srs}
    wms_opts: {{ version: "1.3.0" }}
"""


@contextlib.contextmanager
def nginx_static(work, root, prefix="/tiles/", access_log=None, open_file_cache=False):
    """nginx serving directory `root` at `prefix` (sendfile, one worker per
    core, no access log unless `access_log` names its file, with
    `open_file_cache` a cache of 10,000 open files); yields (port,
    process)."""
    work = Path(work)
    port = free_port()
    (work / "nginx").mkdir(exist_ok=True)
    conf = work / f"nginx-{port}.conf"
    # As root, nginx workers would run as nobody and could not read a
    # private temporary directory.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(f"""
{user}
daemon off;
worker_processes auto;
pid {work}/nginx-{port}.pid;
error_log {work}/nginx/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log {access_log or "off"};
  sendfile on;
  tcp_nopush on;
  {"open_file_cache max=10000 inactive=60s;" if open_file_cache else ""}
  keepalive_requests 1000000;
  client_body_temp_path {work}/nginx;
  proxy_temp_path {work}/nginx;
  fastcgi_temp_path {work}/nginx;
  uwsgi_temp_path {work}/nginx;
  scgi_temp_path {work}/nginx;
  types {{ image/png png; }}
  server {{
    listen 127.0.0.1:{port};
    location {prefix} {{ alias {root}/; }}
  }}
}}
""")
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(work)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("nginx did not start")
                time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def demo_config_uncached(binary):
    """The embedded demo layers read from data/, with caching off."""
    text = subprocess.run([binary, "demo-config"], capture_output=True, text=True, check=True).stdout
    text = text.replace("/vsimem/tessera-demo/", f"{ROOT}/data/")
    return re.sub(r"(?m)^  - name: (\S+)$", r"  - name: \1\n    cache: { store: none }", text)


def run_load(port, paths, clients):
    """Sends every path once, spread over `clients` keep-alive connections.
    Returns (seconds, latencies_ms, errors, cache_hits)."""
    latencies, errors = [], []
    hits = [0]
    lock = threading.Lock()
    index = [0]

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                if index[0] >= len(paths):
                    break
                path = paths[index[0]]
                index[0] += 1
            t0 = time.perf_counter()
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            dt = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(dt)
                if r.status != 200:
                    errors.append((path, r.status))
                if r.getheader("X-Cache") == "HIT":
                    hits[0] += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, latencies, errors, hits[0]


def wait_quiet(max_wait=60.0, idle=0.85):
    """Waits until the machine's CPUs are at least `idle` idle over half a
    second (at most `max_wait` seconds)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        i0, t0 = sample()
        time.sleep(0.5)
        i1, t1 = sample()
        if t1 > t0 and (i1 - i0) / (t1 - t0) >= idle:
            return
    print("  (machine not quiet; measuring anyway)", flush=True)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def metric(port, sample):
    """The value of one sample (`name{labels}` as written) from /metrics; 0 when absent."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return (f"Machine: {os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}; "
            f"{datetime.date.today().isoformat()}; release build.")


def ensure_tools():
    """nginx and wrk from Debian, installed when missing."""
    missing = [t for t in ("nginx", "wrk") if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True)


def wrk(url_base, paths_file, connections, seconds, headers=None):
    """wrk with `connections` connections for `seconds`, cycling through
    the paths of `paths_file` (one per line), each request with `headers`:
    (requests/s, p50, p99); any non-2xx answer stops the benchmark."""
    script = Path(paths_file).with_suffix(".lua")
    header_lines = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in (headers or {}).items())
    script.write_text(f"""
{header_lines}local paths = {{}}
for line in io.lines("{paths_file}") do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
""")
    out = subprocess.run(["wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{seconds}s", "--latency",
                          "-s", str(script), url_base], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} non-2xx responses from {url_base}:\n{out}")
    return rate, lat.get("50", "?"), lat.get("99", "?")
