"""A loopback HTTP server of the repo's data files (or another directory)
with range requests and ETags, as object stores and CDNs serve COGs and
archives; `delay` slows every request (a slow source), `hits` counts them,
`ranges` lists the ranges asked."""
import http.server
import os
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with HTTP range requests, as object stores and CDNs serve COGs."""

    def __init__(self, request, client_address, server):
        super().__init__(request, client_address, server, directory=server.directory)

    def log_message(self, *args):
        pass

    def send_head(self):
        self.server.hits += 1
        if self.server.delay:
            time.sleep(self.server.delay)
        self.server.headers_seen.append(dict(self.headers))
        if self.path.startswith("/to/"):
            # /to/NAME redirects to NAME on the server's redirect target.
            self.send_response(302)
            self.send_header("Location", f"{self.server.redirect_to}/{self.path.removeprefix('/to/')}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        stat = os.stat(path)
        start, _, end = rng.removeprefix("bytes=").partition("-")
        start = int(start)
        end = min(int(end) if end else size - 1, size - 1)
        self.server.ranges.append((self.path, start, end))
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "image/tiff")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{stat.st_ino:x}-{stat.st_size:x}-{stat.st_mtime_ns:x}"')
        self.end_headers()
        self.remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        remaining = getattr(self, "remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        outputfile.write(source.read(remaining))


def start_cog_server(directory=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    server.directory = str(directory or os.path.join(ROOT, "data"))
    server.ranges = []
    server.hits = 0
    server.headers_seen = []
    server.redirect_to = None
    server.delay = 0.0
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    server.authority = f"127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
