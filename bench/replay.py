"""An HTTP upstream that answers from a recording of a real one.

`Replay(upstream)` listens on 127.0.0.1. While `recording` is true it
forwards every GET to `upstream` (scheme://host:port; the path and query
are kept) and keeps the status, Content-Type and body under the request's
path and query; afterwards it answers those requests from memory, byte for
byte, and answers any other request 502 and counts it in `unknown`. The
cascade benchmark uses it to take the upstream's CPU off the machine's two
cores: the caches in front get MapServer's own responses, as fast as an
upstream on its own cores would send them.
"""
import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import free_port


class Replay:
    def __init__(self, upstream):
        parts = urllib.parse.urlsplit(upstream)
        self._host, self._port = parts.hostname, parts.port
        self.recording = True
        self.answers = {}
        self.served = 0  # GetMaps answered
        self.unknown = 0
        self._lock = threading.Lock()
        self.port = free_port()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if replay.recording:
                    answer = replay._fetch(self.path)
                    with replay._lock:
                        replay.answers[self.path] = answer
                else:
                    answer = replay.answers.get(self.path)
                with replay._lock:
                    if answer is None:
                        replay.unknown += 1
                    elif "request=getmap" in self.path.lower():
                        replay.served += 1
                status, content_type, body = answer or (502, "text/plain", b"not in the recording\n")
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _fetch(self, path):
        conn = http.client.HTTPConnection(self._host, self._port, timeout=120)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.getheader("Content-Type", "application/octet-stream"), r.read()
        finally:
            conn.close()

    def url_for(self, upstream_url):
        """`upstream_url` with its host and port replaced by this server's."""
        parts = urllib.parse.urlsplit(upstream_url)
        return urllib.parse.urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.port}"))

    def reset_counts(self):
        with self._lock:
            self.served = 0
            self.unknown = 0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
