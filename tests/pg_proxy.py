"""A TCP proxy in front of the test PostgreSQL: it can cut the database off, and it
counts the network round trips of what passes through it.

Cutting the proxy does to a client what a restart or a failover of PostgreSQL
does: every open connection is reset (the server rolls back what it was in the
middle of, as when its client goes away) and new connections are refused until
the proxy is restored.  It stands in for stopping the shared test server,
which other tests use at the same time.

:attr:`TcpProxy.round_trips` counts, over every connection, each time the
client sends after it last received (or first sends): one request burst, one
wait for the server.  Statements sent together in a pipeline are one round
trip; BEGIN and COMMIT sent on their own are one each.
"""
from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class TcpProxy:
    """127.0.0.1:<port> -> ``target`` (host, port); :meth:`cut` and :meth:`restore`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._up = True
        self._closed = False
        self.accepted = 0
        self.round_trips = 0
        self._last: dict[int, str] = {}      # connection -> direction of its last data
        threading.Thread(target=self._accept, daemon=True).start()

    @classmethod
    def to_url(cls, url: str) -> tuple["TcpProxy", str]:
        """A proxy to the server of ``url``, and ``url`` through it."""
        parts = urlsplit(url)
        proxy = cls((parts.hostname or "127.0.0.1", parts.port or 5432))
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user + '@' if user else ''}127.0.0.1:{proxy.port}"
        return proxy, urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if not self._up:
                    _reset(client)               # the server is "down": refused at once
                    continue
                try:
                    server = socket.create_connection(self.target, timeout=5)
                except OSError:
                    _reset(client)
                    continue
                server.settimeout(None)
                self._open.update((client, server))
                self.accepted += 1
            for a, b, way in ((client, server, "up"), (server, client, "down")):
                threading.Thread(target=self._pipe, args=(a, b, way, client.fileno()),
                                 daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, way: str, conn: int) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if way == "up" and self._last.get(conn) != "up":
                        self.round_trips += 1
                    self._last[conn] = way
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._open.discard(s)
                _reset(s)

    def cut(self) -> None:
        """Reset every connection and refuse new ones (the server went away)."""
        with self._lock:
            self._up = False
            doomed, self._open = list(self._open), set()
        for s in doomed:
            _reset(s)

    def restore(self) -> None:
        with self._lock:
            self._up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def _reset(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
