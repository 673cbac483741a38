#!/usr/bin/env python3
"""A faulty loopback proxy in front of a real S3 server (MinIO), for tests of
what a real server cannot be made to do on demand. Requests are forwarded
unchanged (Host header included, so signatures stay valid) except multipart
part uploads (`PUT ...?partNumber=...`) -- or, with --conditional, PUTs with
If-None-Match or If-Match (lease objects, pack merges) -- which follow the
fault plan:

  --fail N     every Nth part upload is answered 500 or 503 (alternately)
  --reset N    every Nth part upload: the connection is reset, no answer
  --stall N    every Nth part upload: no answer for --stall-secs seconds
  --fail-all   every part upload is answered 503
  --conditional  the plan applies to conditional PUTs instead of part uploads

usage: faulty-proxy.py LISTEN_PORT UPSTREAM_PORT [plan...]
Prints "ready" once listening; logs each fault on stderr. `GET /__proxy_counts`
answers the requests forwarded so far by method, as JSON (benchmarks count
object-store requests with it).
"""
import argparse
import collections
import http.client
import itertools
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("listen", type=int)
p.add_argument("upstream", type=int)
p.add_argument("--fail", type=int, default=0)
p.add_argument("--reset", type=int, default=0)
p.add_argument("--stall", type=int, default=0)
p.add_argument("--stall-secs", type=float, default=10.0)
p.add_argument("--fail-all", action="store_true")
p.add_argument("--conditional", action="store_true")
plan = p.parse_args()

parts = itertools.count(1)
counts = collections.Counter()
lock = threading.Lock()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def fault(self):
        """The fault for this request, if any."""
        if self.command != "PUT":
            return None
        if plan.conditional:
            if not (self.headers.get("If-None-Match") or self.headers.get("If-Match")):
                return None
        elif "partNumber=" not in self.path:
            return None
        with lock:
            n = next(parts)
        if plan.fail_all:
            return 503
        if plan.reset and n % plan.reset == 0:
            return "reset"
        if plan.stall and n % plan.stall == 0:
            return "stall"
        if plan.fail and n % plan.fail == 0:
            return 500 if (n // plan.fail) % 2 else 503
        return None

    def handle_any(self):
        if self.path == "/__proxy_counts":
            with lock:
                data = json.dumps(counts).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        with lock:
            counts[self.command] += 1
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.fault()
        if fault is not None:
            print(f"fault {fault} on {self.command} {self.path}", file=sys.stderr, flush=True)
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if fault == "stall":
            time.sleep(plan.stall_secs)
            self.close_connection = True
            return
        if isinstance(fault, int):
            data = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
            self.send_response(fault)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn = http.client.HTTPConnection("127.0.0.1", plan.upstream, timeout=60)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request(self.command, self.path, body=body if length or self.command in ("PUT", "POST") else None,
                     headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


server = ThreadingHTTPServer(("127.0.0.1", plan.listen), Proxy)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()
