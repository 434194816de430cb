"""A small authoritative DNS server over UDP for the balancer's test: it answers A queries for the names
it is given, as the cluster's DNS answers a headless Service's name with the addresses of its ready
pods, and the test changes those addresses while it runs (a pod added, a pod leaving).

Only what a resolver asks of a headless Service is implemented (RFC 1035 4.1): one question, type A
answered with the name's addresses, AAAA with none, an unknown name with NXDOMAIN. A query's EDNS
record (HAProxy sends one) is read past and not echoed, which RFC 6891 allows.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterable
from types import TracebackType

TYPE_A = 1
CLASS_IN = 1
NOERROR, FORMERR, NXDOMAIN = 0, 1, 3
TTL_SECONDS = 1


class DnsResponder:
    """Answers on 127.0.0.1:<port> (a free one) from a thread, until the `with` block ends."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._records: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-responder", daemon=True)
        self.queries = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, name: str, addresses: Iterable[str]) -> None:
        """From now on `name` resolves to `addresses` (none: the name exists without addresses)."""
        with self._lock:
            self._records[name.rstrip(".").lower()] = tuple(addresses)

    def __enter__(self) -> DnsResponder:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                query, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.queries += 1
            reply = self.answer(query)
            if reply is not None:
                self._sock.sendto(reply, peer)

    def answer(self, query: bytes) -> bytes | None:
        """The response to one query message; None for what is not a query."""
        if len(query) < 12:
            return None
        ident, flags, qdcount = struct.unpack("!HHH", query[:6])
        if flags & 0x8000:  # a response, not a query
            return None
        recursion_desired = flags & 0x0100
        try:
            if qdcount != 1:
                raise ValueError("one question expected")
            name, end = _read_name(query, 12)
            qtype, qclass = struct.unpack("!HH", query[end : end + 4])
        except (ValueError, struct.error):
            return struct.pack("!HHHHHH", ident, 0x8000 | recursion_desired | FORMERR, 0, 0, 0, 0)
        question = query[12 : end + 4]
        with self._lock:
            addresses = self._records.get(name)
        if addresses is None:
            rcode, answers = NXDOMAIN, []
        else:
            rcode = NOERROR
            wanted = qtype == TYPE_A and qclass == CLASS_IN
            answers = [_a_record(address) for address in addresses] if wanted else []
        # QR, AA (this server owns the names), RD copied from the query.
        header = struct.pack("!HHHHHH", ident, 0x8000 | 0x0400 | recursion_desired | rcode, 1, len(answers), 0, 0)
        return header + question + b"".join(answers)


def _read_name(message: bytes, offset: int) -> tuple[str, int]:
    """The question's name (lower case, without the root dot) and the offset just past it."""
    labels = []
    while True:
        if offset >= len(message):
            raise ValueError("name runs past the message")
        length = message[offset]
        offset += 1
        if length == 0:
            return ".".join(labels).lower(), offset
        if length > 63:  # a compression pointer: never in a question a resolver sends
            raise ValueError("compressed name in a question")
        labels.append(message[offset : offset + length].decode("ascii"))
        offset += length


def _a_record(address: str) -> bytes:
    # The name is a pointer to the question's (offset 12), as every server writes it.
    return struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_SECONDS, 4) + socket.inet_aton(address)
