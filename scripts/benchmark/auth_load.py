"""Load for `scripts/bench security`'s SCRAM part: connections that authenticate and close,
again and again. Run as ``python -m benchmark.auth_load PORT SECONDS CONNECTIONS USER
PASSWORD [CAFILE]`` (from scripts/); prints one JSON line: authentications done, failures,
seconds.

Each connection does what a Kafka client does before its first real request: ApiVersions
v3, SaslHandshake v1 (SCRAM-SHA-512) and the two SaslAuthenticate v2 round trips of
RFC 5802, the server's signature checked, over TLS when CAFILE is given. The client keeps
the salted password once computed (RFC 5802 allows it), so its PBKDF2 (4096 rounds of
SHA-512) is not paid per connection: the load is on the broker.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import ssl
import struct
import sys
import time

MECHANISM = "SCRAM-SHA-512"
CLIENT_ID = b"auth-load"
_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    header = _HEADER.pack(api_key, version, 1, len(CLIENT_ID)) + CLIENT_ID
    return header + b"\0" if flexible else header  # flexible: no tagged fields


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _compact(data: bytes) -> bytes:
    return _uvarint(len(data) + 1) + data


API_VERSIONS = _frame(_header(18, 3, True) + _compact(b"auth-load") + _compact(b"1") + b"\0")
SASL_HANDSHAKE = _frame(
    _header(17, 1, False) + struct.pack(">h", len(MECHANISM)) + MECHANISM.encode()
)


def _authenticate(token: bytes) -> bytes:
    return _frame(_header(36, 2, True) + _compact(token) + b"\0")


def _auth_bytes(response: bytes) -> bytes:
    """A SaslAuthenticate v2 response's auth_bytes (header v1: correlation id, tags)."""
    pos = 5
    error = struct.unpack_from(">h", response, pos)[0]
    length, pos = _read_uvarint(response, pos + 2)
    if error:
        message = response[pos : pos + length - 1].decode() if length else ""
        raise ConnectionError(f"SaslAuthenticate error {error}: {message}")
    pos += max(length - 1, 0)
    length, pos = _read_uvarint(response, pos)
    return response[pos : pos + length - 1]


class Scram:
    """RFC 5802 with SHA-512, the salted password cached by salt and iterations."""

    def __init__(self, user: str, password: str) -> None:
        self.user = user
        self.password = password.encode()
        self.keys: dict[tuple[bytes, int], tuple[bytes, bytes, bytes]] = {}

    def _keys(self, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
        keys = self.keys.get((salt, iterations))
        if keys is None:
            salted = hashlib.pbkdf2_hmac("sha512", self.password, salt, iterations)
            client_key = hmac.digest(salted, b"Client Key", "sha512")
            server_key = hmac.digest(salted, b"Server Key", "sha512")
            keys = self.keys[salt, iterations] = (
                client_key,
                hashlib.sha512(client_key).digest(),
                server_key,
            )
        return keys

    def first(self) -> tuple[bytes, str]:
        bare = f"n={self.user},r={base64.b64encode(os.urandom(18)).decode()}"
        return f"n,,{bare}".encode(), bare

    def final(self, bare: str, server_first: bytes) -> tuple[bytes, bytes]:
        """The client-final message and the server signature to expect."""
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        client_key, stored_key, server_key = self._keys(
            base64.b64decode(fields["s"]), int(fields["i"])
        )
        without_proof = f"c=biws,r={fields['r']}"
        message = f"{bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, message, "sha512")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        return final, base64.b64encode(hmac.digest(server_key, message, "sha512"))


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> bytes:
    writer.write(frame)
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


async def _authenticate_once(port: int, scram: Scram, tls: ssl.SSLContext | None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    try:
        if struct.unpack_from(">h", await _call(reader, writer, API_VERSIONS), 4)[0]:
            raise ConnectionError("ApiVersions failed")
        if struct.unpack_from(">h", await _call(reader, writer, SASL_HANDSHAKE), 4)[0]:
            raise ConnectionError("SaslHandshake failed")
        first, bare = scram.first()
        server_first = _auth_bytes(await _call(reader, writer, _authenticate(first)))
        final, expected = scram.final(bare, server_first)
        server_final = _auth_bytes(await _call(reader, writer, _authenticate(final)))
        if server_final != b"v=" + expected:
            raise ConnectionError(f"bad server final message {server_final!r}")
    finally:
        writer.close()


async def _run(
    port: int, seconds: float, connections: int, scram: Scram, tls: ssl.SSLContext | None
) -> dict[str, object]:
    done = failed = 0
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done, failed
        while time.monotonic() < deadline:
            try:
                await _authenticate_once(port, scram, tls)
                done += 1
            except (OSError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as e:
                failed += 1
                if len(errors) < 3:
                    errors.append(repr(e))

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.monotonic() - started
    return {"authentications": done, "failures": failed, "seconds": elapsed, "errors": errors}


def main(argv: list[str]) -> int:
    port, seconds, connections, user, password = argv[:5]
    tls = ssl.create_default_context(cafile=argv[5]) if len(argv) > 5 else None
    scram = Scram(user, password)
    result = asyncio.run(_run(int(port), float(seconds), int(connections), scram, tls))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
