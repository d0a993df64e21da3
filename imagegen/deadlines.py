"""One HTTP answer within a deadline for the whole of it: connect, send, head and body.

A socket timeout bounds each read only, so a server that sends a byte every few seconds is never
cut off by it; the registry client (``imagegen.registry.distribution``), the package index reader
(``imagegen.compat.index_reader``) and torch's header reader (``imagegen.compat.headers``) need
the whole answer bounded, and get it here.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests


class DeadlinePassed(Exception):
    """An answer that did not arrive whole within its deadline (``seconds``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no whole answer within {seconds:g} s")
        self.seconds = seconds


def answer_within(
    http: requests.Session,
    method: str,
    url: str,
    deadline: float,
    *,
    read_body: Callable[[int], bool] = lambda status: True,
    **kwargs: Any,
) -> requests.Response:
    """``http.request(method, url, **kwargs)`` with its body read (only its head where
    ``read_body(status)`` says no), all of it within ``deadline`` seconds; else DeadlinePassed.

    The request runs on a daemon thread that the caller waits for: a socket timeout bounds each
    read only, and a trickle of bytes never trips it. Past the deadline, a connection whose head
    has arrived is shut down, which ends that thread's read; one still waiting for its head ends
    by itself (no byte for ``deadline`` seconds, or the server closing), having nowhere to report.
    The request's own exceptions are raised here, in the caller's thread.
    """
    arrived: list[requests.Response] = []  # the response, once its head is in
    outcome: list[requests.Response | BaseException] = []

    def work() -> None:
        try:
            response = http.request(method, url, stream=True, timeout=(deadline, deadline), **kwargs)
            arrived.append(response)
            if read_body(response.status_code):
                _ = response.content  # read here, inside the deadline; kept on the response
            else:
                response.close()
            outcome.append(response)
        except BaseException as exc:  # handed over to the caller's thread, raised there
            outcome.append(exc)

    worker = threading.Thread(target=work, name=f"answer-within {method}", daemon=True)
    worker.start()
    worker.join(deadline)
    if not outcome:
        if arrived:
            _shut(arrived[0])
        raise DeadlinePassed(deadline)
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _shut(response: requests.Response) -> None:
    """Shut the socket under ``response`` down, so that a read blocked on it returns at once."""
    connection = getattr(response.raw, "connection", None)  # urllib3 2's HTTPResponse.connection
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed: nothing is reading it
            sock.shutdown(socket.SHUT_RDWR)
