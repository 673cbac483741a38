"""The Debian package (cargo-deb): installed with dpkg on this machine, the
binary started as its systemd unit would start it, a tile fetched, then
purged without leaving anything behind. Needs root, as dpkg does."""
import os
import pathlib
import pwd
import shlex
import subprocess
import time
import urllib.request

import pytest

from conftest import ROOT, free_port

PACKAGE = "tessera"


def run(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("installing a Debian package needs root (scripts/test runs as root in CI)", pytrace=False)
    cargo_deb = os.environ.get("TESSERA_CARGO_DEB")
    if not cargo_deb:
        pytest.fail("TESSERA_CARGO_DEB is not set: run the tests through scripts/test", pytrace=False)
    out = tmp_path_factory.mktemp("deb") / "tessera.deb"
    # The book the package installs, built first (as before `cargo deb`).
    r = run(str(ROOT / "scripts" / "docs"))
    assert r.returncode == 0, r.stderr
    # The debug binary the suite already built: the package is what is
    # tested here, not the optimiser.
    r = run(cargo_deb, "-p", "tessera-cli", "--no-build", "--profile", "dev", "--no-strip", "-o", str(out),
            cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return out


def test_the_package_holds_the_binary_unit_config_and_demo_data(deb):
    contents = run("dpkg-deb", "--contents", str(deb)).stdout
    for path in ("./usr/bin/tessera", "./etc/tessera/tessera.yaml", "./usr/lib/systemd/system/tessera.service",
                 "./usr/share/tessera/demo/shadedrelief-5400.tif", "./usr/share/doc/tessera/README.md",
                 "./usr/share/doc/tessera/book/index.html", "./usr/share/doc/tessera/book/tutorial-qgis.html",
                 "./usr/share/doc/tessera/book/css/general.css"):
        assert path in contents, path
    info = run("dpkg-deb", "--info", str(deb)).stdout
    assert "Package: tessera" in info and "libgdal" in info, info
    conffiles = run("dpkg-deb", "--info", str(deb), "conffiles").stdout
    assert "/etc/tessera/tessera.yaml" in conffiles.split(), conffiles


def test_installed_it_serves_tiles_as_its_own_user_and_purges_cleanly(deb, tmp_path):
    run("dpkg", "--purge", PACKAGE)  # a leftover of an interrupted run
    r = run("dpkg", "-i", str(deb))
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        user = pwd.getpwnam("tessera")
        cache = pathlib.Path("/var/cache/tessera/tiles")
        assert cache.is_dir() and cache.stat().st_uid == user.pw_uid
        # As the service user: a check run as root would create the store's
        # staging directory owned by root.
        check = run("runuser", "-u", "tessera", "--", "/usr/bin/tessera", "check", "/etc/tessera/tessera.yaml")
        assert check.returncode == 0, check.stderr
        unit = pathlib.Path("/usr/lib/systemd/system/tessera.service").read_text()
        exec_start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
        assert "User=tessera" in unit
        port = free_port()
        log = open(tmp_path / "unit.log", "w")
        proc = subprocess.Popen(["runuser", "-u", "tessera", "--", *shlex.split(exec_start),
                                 "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2):
                        break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "unit.log").read_text()
                    time.sleep(0.2)
            with urllib.request.urlopen(url + "/tiles/relief/WebMercatorQuad/1/0/0.png", timeout=60) as r:
                assert r.status == 200 and r.read()[:4] == b"\x89PNG"
            # The installed book, served where the pages link.
            with urllib.request.urlopen(url + "/book/security.html", timeout=60) as r:
                assert r.status == 200 and b'id="limits"' in r.read()
            # Tiles are saved on the encode pool after the answer: waited
            # for with a deadline.
            deadline = time.monotonic() + 30
            stored = list(cache.rglob("*.png"))
            while not stored and time.monotonic() < deadline:
                time.sleep(0.1)
                stored = list(cache.rglob("*.png"))
            assert stored and all(p.stat().st_uid == user.pw_uid for p in stored)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        r = run("dpkg", "--purge", PACKAGE)
    assert r.returncode == 0, r.stdout + r.stderr
    for gone in ("/usr/bin/tessera", "/etc/tessera/tessera.yaml", "/usr/lib/systemd/system/tessera.service",
                 "/var/cache/tessera/tiles", "/usr/share/doc/tessera/book"):
        assert not os.path.exists(gone), gone
    with pytest.raises(KeyError):
        pwd.getpwnam("tessera")
