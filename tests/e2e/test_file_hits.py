"""Hits on a file store without a memory LRU: a tile file the page cache
holds, whose content hash is known, is sent to the socket by `sendfile`
instead of being read. Every answer on that path must be the file's bytes
with the same headers as a read one: on keep-alive connections, pipelined,
after a 304 or a HEAD, for files larger than the socket's buffers, and
after the file is replaced or rewritten in place by another tool."""
import http.client
import os
import socket
import time
import urllib.parse

from conftest import relief_config, serving

TILE = "/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png"


def tile_path(cache, z, x, y):
    return cache / "relief" / "WebMercatorQuad" / str(z) / str(x) / f"{y}.png"


def connect(server):
    url = urllib.parse.urlsplit(server.url)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=120)


def get(conn, path, headers=None, method="GET"):
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def read_response(f):
    """(status, headers, body) of one HTTP/1.1 response read from `f`."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = f.read(int(headers.get("content-length", 0)))
    return status, headers, body


def files_sent(conn):
    """The server's count of tile hits sent from their file by sendfile."""
    _, _, body = get(conn, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("tessera_tile_files_sent_total "):
            return float(line.split()[1])
    raise AssertionError("no tessera_tile_files_sent_total in /metrics")


def start(tmp_path, tmp_path_factory):
    cache = tmp_path / "tiles"
    config = relief_config(tmp_path, f"{{ type: file, path: {cache}, memory: 0 }}")
    return cache, serving(tmp_path_factory, "--config", str(config))


def test_file_hits_are_the_stored_bytes_with_the_same_headers_on_one_connection(tmp_path, tmp_path_factory):
    cache, server_cm = start(tmp_path, tmp_path_factory)
    with server_cm as server:
        conn = connect(server)
        paths = [TILE.format(z=3, x=x, y=y) for x in range(2, 5) for y in range(2, 4)]
        first = {}
        for p in paths:
            status, headers, body = get(conn, p)
            assert status == 200, body
            first[p] = (headers["etag"], body)
        sent_before = files_sent(conn)
        for round_ in range(3):  # read and hashed, then sent from the file
            for p in paths:
                status, headers, body = get(conn, p)
                z, x, y = (int(v) for v in p.rsplit(".", 1)[0].split("/")[-3:])
                assert status == 200
                assert headers["x-cache"] == "HIT"
                assert body == tile_path(cache, z, x, y).read_bytes() == first[p][1], (round_, p)
                assert headers["etag"] == first[p][0], "the ETag is the content hash on every path"
                assert int(headers["content-length"]) == len(body)
                assert headers["content-type"] == "image/png"
                assert headers["cache-control"] == "public, max-age=3600"
                assert "last-modified" in headers and headers["access-control-allow-origin"] == "*"
            # A 304 and a HEAD carry no body; the next answer is still whole.
            etag = first[paths[0]][0]
            status, _, body = get(conn, paths[0], {"If-None-Match": etag})
            assert (status, body) == (304, b"")
            status, headers, body = get(conn, paths[1], method="HEAD")
            assert (status, body) == (200, b"") and int(headers["content-length"]) == len(first[paths[1]][1])
            status, _, body = get(conn, paths[2])
            assert (status, body) == (200, first[paths[2]][1])
        # Rounds 2 and 3 and the last GETs of rounds 2 and 3 took the file way.
        assert files_sent(conn) - sent_before >= 2 * len(paths) + 2


def test_pipelined_requests_get_their_own_files_in_order(tmp_path, tmp_path_factory):
    cache, server_cm = start(tmp_path, tmp_path_factory)
    with server_cm as server:
        conn = connect(server)
        paths = [TILE.format(z=4, x=x, y=6) for x in range(4, 10)]
        etags = {}
        for p in paths + paths:  # stored, then read once (hash known)
            _, headers, _ = get(conn, p)
            etags[p] = headers["etag"]
        port = urllib.parse.urlsplit(server.url).port
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            asks = []
            for i, p in enumerate(paths):
                if i == 2:
                    asks.append((p, f"GET {p} HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etags[p]}\r\n\r\n"))
                elif i == 3:
                    asks.append((p, f"HEAD {p} HTTP/1.1\r\nHost: x\r\n\r\n"))
                else:
                    asks.append((p, f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n"))
            s.sendall("".join(a for _, a in asks).encode())
            f = s.makefile("rb")
            for i, (p, _) in enumerate(asks):
                z, x, y = (int(v) for v in p.rsplit(".", 1)[0].split("/")[-3:])
                if i == 3:  # HEAD: headers only
                    status = int(f.readline().split()[1])
                    while f.readline() not in (b"\r\n", b""):
                        pass
                    assert status == 200
                    continue
                status, headers, body = read_response(f)
                if i == 2:
                    assert status == 304 and body == b""
                else:
                    assert status == 200
                    assert body == tile_path(cache, z, x, y).read_bytes(), p
                    assert headers["etag"] == etags[p]


def test_large_replaced_and_rewritten_files_are_sent_as_they_are_now(tmp_path, tmp_path_factory):
    cache, server_cm = start(tmp_path, tmp_path_factory)
    with server_cm as server:
        conn = connect(server)
        sizes = {(5, 1, 1): 3 << 20, (5, 1, 2): 5 << 20}  # larger than socket buffers; above sendfile's 4 MiB
        for (z, x, y), size in sizes.items():
            path = tile_path(cache, z, x, y)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Any file the store holds is served as it is (written by another tool).
            path.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(size - 8))
        sent_before = files_sent(conn)
        for _ in range(3):
            for (z, x, y) in sizes:
                status, headers, body = get(conn, TILE.format(z=z, x=x, y=y))
                assert status == 200 and headers["x-cache"] == "HIT"
                assert body == tile_path(cache, z, x, y).read_bytes()

        # The 3 MiB file twice from its file, the 5 MiB one read every time.
        assert files_sent(conn) - sent_before == 2
        # A slow reader with a small receive buffer: the 3 MiB file goes out
        # in many partial sends.
        port = urllib.parse.urlsplit(server.url).port
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {TILE.format(z=5, x=1, y=1)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(0.5)
        status, _, body = read_response(s.makefile("rb"))
        s.close()
        assert status == 200 and body == tile_path(cache, 5, 1, 1).read_bytes()

        p = TILE.format(z=5, x=1, y=1)
        path = tile_path(cache, 5, 1, 1)
        _, before, _ = get(conn, p)
        # Replaced by a rename, as tessera and rsync write.
        tmp = path.with_suffix(".new")
        tmp.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(1000))
        tmp.rename(path)
        for _ in range(2):
            _, headers, body = get(conn, p)
            assert body == path.read_bytes() and headers["etag"] != before["etag"]
        replaced = headers["etag"]
        # Rewritten in place with the same length, as `cp` does.
        time.sleep(0.05)
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(os.urandom(992))
        for _ in range(2):
            _, headers, body = get(conn, p)
            assert body == path.read_bytes() and headers["etag"] != replaced
        # Deleted (a truncation by another process): the kept file is let
        # go at the next hit, which renders the tile again.
        kept = path.read_bytes()
        path.unlink()
        _, headers, body = get(conn, p)
        assert headers["x-cache"] == "MISS" and body != kept
