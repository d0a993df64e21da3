"""A local HTTP server standing in for a package index or its file host in the unit tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and answers with a body, whole or by an HTTP range."""

    def log_message(self, *args: object) -> None:
        pass

    def send_body(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_ranged(self, data: bytes, honour_ranges: bool = True) -> None:
        """``data``, or the part a ``Range: bytes=A-B`` header asks for (206), as a file host does."""
        wanted = self.headers.get("Range")
        if not (wanted and honour_ranges):
            self.send_body(200, data, "application/octet-stream")
            return
        start, end = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
        part = data[start : end + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)


@dataclass
class Served:
    httpd: ThreadingHTTPServer

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve(handler: type[BaseHTTPRequestHandler]) -> Served:
    """``handler`` answering on a free local port, in a daemon thread, until ``close``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return Served(httpd)
