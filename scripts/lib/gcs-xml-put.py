#!/usr/bin/env python3
"""A loopback front for fake-gcs-server that adds the one XML API call it
lacks (fsouza/fake-gcs-server#331): the simple object upload
`PUT /<bucket>/<object>` that real GCS answers and object_store sends.

That call becomes the JSON media upload of the same bytes, with the
`x-goog-if-generation-match` precondition passed on as `ifGenerationMatch`,
and the answer carries the ETag and generation headers GCS sends. Every
other request is forwarded unchanged.

usage: gcs-xml-put.py LISTEN_PORT UPSTREAM_PORT
"""
import http.client
import json
import socket
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = ("127.0.0.1", int(sys.argv[2]))
HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body leave in separate writes: without this, Nagle's
        # algorithm and delayed ACKs add 40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def forward(self, method, path, body, headers):
        conn = http.client.HTTPConnection(*UPSTREAM, timeout=30)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp, data

    def reply(self, status, headers, data):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in HOP:
                self.send_header(k, v)
        # A HEAD answer has no body: its length is the object's, as sent.
        length = dict((k.lower(), v) for k, v in headers).get("content-length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def plain(self):
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        resp, data = self.forward(self.command, self.path, self.body(), headers)
        self.reply(resp.status, resp.getheaders(), data)

    do_GET = do_HEAD = do_POST = do_DELETE = do_PATCH = plain

    def do_PUT(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.lstrip("/").split("/", 1)
        xml_put = (
            len(parts) == 2
            and not url.query
            and parts[0] not in ("upload", "storage", "_internal", "batch")
        )
        if not xml_put:
            return self.plain()
        bucket, name = (urllib.parse.unquote(p) for p in parts)
        query = {"uploadType": "media", "name": name}
        match = self.headers.get("x-goog-if-generation-match")
        if match is not None:
            query["ifGenerationMatch"] = match
        path = f"/upload/storage/v1/b/{urllib.parse.quote(bucket)}/o?" + urllib.parse.urlencode(query)
        ctype = self.headers.get("Content-Type") or "application/octet-stream"
        resp, data = self.forward("POST", path, self.body(), {"Content-Type": ctype})
        if resp.status != 200:
            return self.reply(resp.status, resp.getheaders(), data)
        obj = json.loads(data)
        self.reply(200, [("ETag", f'"{obj["etag"]}"'), ("x-goog-generation", str(obj["generation"]))], b"")


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Front).serve_forever()
