"""What a hostile client writes to a TLS port instead of a proper handshake (pure: the one
ClientHello is made by Python's own TLS client in memory, no socket).

A TLS record is ``type(1) version(2) length(2) payload``; the handshake starts with a
ClientHello in a record of type 22 (handshake).
"""

from __future__ import annotations

import random
import ssl
import struct
from functools import cache

from fuzzing.frames import header, sized
from gregor.wire.versions import API_VERSIONS

HANDSHAKE, ALERT, CHANGE_CIPHER_SPEC, APPLICATION_DATA, HEARTBEAT = 22, 21, 20, 23, 24
MAX_RECORD = 1 << 14  # the largest plaintext a record may carry (RFC 8446 5.1)


def record(content_type: int, payload: bytes, version: int = 0x0303, length: int = -1) -> bytes:
    """One TLS record; ``length`` (if given) is what the header claims, true or not."""
    claimed = len(payload) if length < 0 else length
    return struct.pack(">BHH", content_type, version, claimed) + payload


@cache
def client_hello(tls13: bool = True) -> bytes:
    """A genuine first flight of Python's TLS client (one ClientHello record), written into
    memory: what the broker's handshake expects first."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if not tls13:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _flipped(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def garbage(rng: random.Random) -> list[bytes]:
    """The writes of one hostile connection to a TLS port: random bytes; a ClientHello
    truncated, bit-flipped, fragmented into one-byte records or with a length that lies;
    records of every content type (a heartbeat claiming more than it holds, an alert, a
    change-cipher-spec, application data before any handshake, records past 2^14); an
    SSLv2-style hello; a Kafka request or an HTTP request in clear."""
    hello = client_hello(rng.random() < 0.7)
    body = hello[5:]
    kind = rng.randrange(12)
    if kind == 0:
        return [rng.randbytes(rng.choice((1, 5, 100, 5000)))]
    if kind == 1:
        return [hello[: rng.randrange(1, len(hello))]]
    if kind == 2:
        return [_flipped(hello, rng)]
    if kind == 3:  # the ClientHello a byte per record: legal, and slow to reassemble
        return [b"".join(record(HANDSHAKE, body[i : i + 1], 0x0301) for i in range(len(body)))]
    if kind == 4:
        return [record(HANDSHAKE, body, 0x0301, rng.choice((0, 1, MAX_RECORD + 1, 0xFFFF)))]
    if kind == 5:  # heartbeat request (type 1) claiming 16 KB of payload it does not have
        return [hello, record(HEARTBEAT, b"\x01\x40\x00" + b"x" * 16)]
    if kind == 6:
        return [record(ALERT, bytes([rng.choice((1, 2)), rng.randrange(256)]))]
    if kind == 7:
        return [record(CHANGE_CIPHER_SPEC, b"\x01"), hello]
    if kind == 8:
        return [record(APPLICATION_DATA, rng.randbytes(rng.choice((10, MAX_RECORD + 2048))))]
    if kind == 9:  # SSLv2 CLIENT-HELLO framing
        return [b"\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10" + rng.randbytes(37)]
    if kind == 10:
        return [sized(header(API_VERSIONS, rng.randint(0, 3), 1) + b"\x00" * 8)]
    return [b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"]
