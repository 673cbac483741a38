#!/usr/bin/env python3
"""Starts TiTiler (titiler.application) under uvicorn with TCP_NODELAY on
every accepted connection.

uvicorn does not set TCP_NODELAY on connections it accepts through a socket
shared by several workers (uvicorn issue 3149), so each keep-alive response
waits for the client's delayed ACK (about 40 ms on Linux). Measuring TiTiler
that way would measure Nagle's algorithm, not TiTiler: this launcher wraps the
HTTP protocols' `connection_made` to set the option, in every worker (the
patch is applied at import, which spawned workers repeat).

    titiler_nodelay.py --port 8000 --workers 2 [--app titiler.pgstac.main:app]
"""
import argparse
import socket

import uvicorn.protocols.http.h11_impl as h11_impl

PROTOCOLS = [h11_impl.H11Protocol]
try:
    import uvicorn.protocols.http.httptools_impl as httptools_impl
    PROTOCOLS.append(httptools_impl.HttpToolsProtocol)
except ImportError:  # httptools is optional
    pass


def with_nodelay(connection_made):
    def patched(self, transport):
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection_made(self, transport)
    return patched


for protocol in PROTOCOLS:
    protocol.connection_made = with_nodelay(protocol.connection_made)


def main():
    import uvicorn
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--app", default="titiler.application.main:app",
                    help="the ASGI app (titiler.pgstac.main:app for titiler-pgstac)")
    args = ap.parse_args()
    uvicorn.run(args.app, host="127.0.0.1", port=args.port, workers=args.workers,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
