"""Connections are bounded: a flood of half-sent requests under a 1,024
open-file limit does not lock other clients out (slowloris), and idle
connections are closed."""
import http.client
import os
import resource
import shutil
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import ROOT, free_port, serving


HEADER_TIMEOUT = 2


def start_limited(tmp_path, fd_limit):
    """tessera under `prlimit --nofile`, with short connection timeouts."""
    if not shutil.which("prlimit"):
        pytest.fail("prlimit (util-linux) is not installed", pytrace=False)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
server:
  header_timeout_secs: {HEADER_TIMEOUT}
  idle_timeout_secs: 3
layers:
  - name: elevation
    source: {{ path: {ROOT}/data/elev.tif }}
    grids: [WebMercatorQuad]
""")
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        ["prlimit", f"--nofile={fd_limit}:{fd_limit}", os.environ["TESSERA_BIN"], "serve",
         "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, port, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail("tessera did not start", pytrace=False)


def test_a_slowloris_flood_under_a_1024_fd_limit_does_not_lock_out_a_fresh_client(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 1400, f"this test opens 1,100 sockets; the hard open-file limit is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    proc, port, url = start_limited(tmp_path, 1024)
    attackers = []
    try:
        for _ in range(1100):
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /health HTTP/1.1\r\nHo")
            except OSError:
                pass
            attackers.append(s)
        start = time.monotonic()
        # A fresh client is answered, well within the header timeout plus 2 s.
        with urllib.request.urlopen(url + "/health", timeout=HEADER_TIMEOUT + 2) as r:
            assert r.status == 200
        with urllib.request.urlopen(url + "/tiles/elevation/WebMercatorQuad/8/132/86.png",
                                    timeout=HEADER_TIMEOUT + 30) as r:
            assert r.status == 200 and r.read().startswith(b"\x89PNG")
        assert time.monotonic() - start < HEADER_TIMEOUT + 2 + 30
        # The half-sent requests are closed by the header timeout.
        time.sleep(HEADER_TIMEOUT + 2)
        closed = 0
        for s in attackers:
            try:
                s.settimeout(0.5)
                if s.recv(1) == b"":
                    closed += 1
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
            except OSError:
                pass
        assert closed == len(attackers), f"{len(attackers) - closed} slow connections still open"
    finally:
        for s in attackers:
            s.close()
        proc.terminate()
        proc.wait(timeout=20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    log = (tmp_path / "server.log").read_text()
    assert log.count("accept failed") <= 10, log[-2000:]


def test_an_idle_keep_alive_connection_is_closed(tmp_path):
    proc, port, url = start_limited(tmp_path, 1024)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in s.recv(4096)
        start = time.monotonic()
        s.settimeout(15)
        assert s.recv(1) == b"", "the server closed the idle connection"
        assert time.monotonic() - start < 10
        s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def thread_cpu_ticks(pid, prefix):
    """CPU ticks (user + system) of each of `pid`'s threads whose name
    starts with `prefix`."""
    ticks = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        if name.startswith(prefix):
            ticks.append(int(fields[11]) + int(fields[12]))
    return ticks


def test_connections_are_served_by_the_configured_connection_threads(tmp_path, tmp_path_factory):
    """Each connection is read and answered by one of `connection_threads`
    threads (each with its own event loop); tile hits are answered there,
    other requests by the main runtime, and keep-alive connections spread
    over every thread all get the right answers."""
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
server: {{ connection_threads: 3 }}
stores: {{ mem: {{ type: memory, memory: 64MiB }} }}
layers:
  - name: elevation
    source: {{ path: {ROOT}/data/elev.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
""")
    tile = "/tiles/elevation/WebMercatorQuad/8/132/86.png"
    with serving(tmp_path_factory, "--config", str(config)) as server:
        pid = server.proc.pid
        assert len(thread_cpu_ticks(pid, "tessera-conn-")) == 3, "three connection threads"
        with urllib.request.urlopen(server.url + tile, timeout=60) as r:
            want = r.read()
        assert want.startswith(b"\x89PNG")
        port = int(server.url.rsplit(":", 1)[1])
        failures = []

        def client(n):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                for i in range(300):
                    path = tile if i % 10 else "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities"
                    conn.request("GET", path)
                    r = conn.getresponse()
                    body = r.read()
                    if r.status != 200:
                        failures.append((n, i, r.status))
                    elif path == tile and (body != want or r.getheader("X-Cache") != "HIT"):
                        failures.append((n, i, "a wrong tile or a miss"))
                    elif path != tile and b"<Capabilities" not in body:
                        failures.append((n, i, "not a capabilities document"))
            finally:
                conn.close()

        clients = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(timeout=300)
        assert not any(c.is_alive() for c in clients), "a client did not finish in 300 s"
        assert not failures, failures[:10]
        # Six connections handed out in turn: each thread served two of
        # them, and each spent time on it.
        ticks = thread_cpu_ticks(pid, "tessera-conn-")
        assert len(ticks) == 3 and all(t > 0 for t in ticks), ticks
