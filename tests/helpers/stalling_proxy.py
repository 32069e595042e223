"""A TCP proxy on 127.0.0.1 in front of the test PostgreSQL server that stalls on cue.

It accepts every connection and forwards both ways until it stalls: from the start
(`stall_after=b""`), or once a client sends bytes containing `stall_after` (a table name, so
the connection, the login and the schema check go through and the first query on that table
hangs). A stalled connection stays open and its bytes are read and dropped: the client's TCP
stack sees every packet acknowledged and no answer, as behind a hung proxy or load balancer,
which no server-side timeout and no keepalive can end. Use `sslmode=disable`, so the proxy
can read the query text.
"""
from __future__ import annotations

import socket
import threading


class StallingProxy:
    """`with StallingProxy(port, stall_after=b"best_configs") as proxy:` then connect to
    127.0.0.1:`proxy.port`. `stalled` tells whether a stall happened."""

    def __init__(self, target_port: int, *, stall_after: bytes) -> None:
        self.target_port = target_port
        self.stall_after = stall_after
        self.stalled = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        self._closing = False

    def __enter__(self) -> "StallingProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing = True
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self.stall_after == b"":
                self.stalled.set()
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets.append(server)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    return
                if from_client and self.stall_after in data:
                    self.stalled.set()
                if self.stalled.is_set():
                    if from_client:
                        self._swallow(source)
                    return
                sink.sendall(data)
        except OSError:
            return

    @staticmethod
    def _swallow(sock: socket.socket) -> None:
        """Read and drop everything, answer nothing, keep the connection open."""
        try:
            while sock.recv(65536):
                pass
        except OSError:
            return
