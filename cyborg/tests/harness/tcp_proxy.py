"""A TCP proxy on 127.0.0.1 that a test stops and starts again: a
service behind it goes away (connections refused, open ones cut) and
comes back on the same address."""
import selectors
import socket
import threading


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` (host, port), one
    thread per direction of each connection, while started."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0))
            self.port: int = probe.getsockname()[1]
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(('127.0.0.1', self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,),
                         name=f'proxy-{self.port}', daemon=True).start()

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown() wakes the accept() of the thread; close() alone
            # would not on Linux.
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._lock:
            cut, self._open = self._open, set()
        for sock in cut:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            threading.Thread(target=self._pump, args=(client, server),
                             daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Copy both ways until either side closes."""
        with selectors.DefaultSelector() as selector:
            selector.register(a, selectors.EVENT_READ, b)
            selector.register(b, selectors.EVENT_READ, a)
            try:
                while True:
                    for key, _ in selector.select():
                        data = key.fileobj.recv(65536)  # type: ignore
                        if not data:
                            return
                        key.data.sendall(data)
            except (OSError, ValueError):
                return
            finally:
                with self._lock:
                    self._open -= {a, b}
                for sock in (a, b):
                    sock.close()
