"""The hostile families of the secured fuzz: each episode attacks the pre-authentication
state of the listeners ``secured.py`` sets up and returns a Counter: its own family's
count of hostile units (frames, tokens, connections) and notes (what the broker did).

Nothing here waits for what a hostile client would not wait for: most episodes write and
hang up; some read the broker's answers (``DRAIN_S``), so that refusals delayed by
``connection.failed.authentication.delay.ms`` are written to a live socket too.
"""

from __future__ import annotations

import multiprocessing
import random
import selectors
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable

from fuzzing.frames import header, pipelining_flood, random_bytes, schema_bodies, sized
from fuzzing.sasl_tokens import (
    BAD_MECHANISMS,
    MECHANISMS,
    Signer,
    authenticate_frame,
    handshake_frame,
    mechanism_token,
    plain_token,
    scram_final,
    scram_first,
    token_frame,
    unsecured_jwt,
)
from fuzzing.secured import (
    JWT,
    REAUTH_MS,
    SASL_LISTENERS,
    SASL_PLAINTEXT,
    SASL_SSL,
    SSL,
    TLS_LISTENERS,
    USERS,
    SocketWireClient,
    Targets,
    call,
    connect,
    login,
    mechanism_client,
    signer,
)
from fuzzing.tls_records import client_hello, garbage
from gregor.apis.context import build
from gregor.wire.schema import request_type
from gregor.wire.versions import API_VERSIONS, METADATA, SASL_AUTHENTICATE

DRAIN_S = 0.3  # longer than the failure delay (100 ms), to read the delayed refusal
DRAIN_SHARE = 0.25  # of episodes that read the broker's answers before hanging up
OVERSIZE = 600_000  # past sasl.server.max.receive.size (524,288)
SLOW_STEP_S = 0.25  # slowloris: a byte per connection this often ...
SLOW_S = 13.0  # ... this long: past the 10 s TLS handshake timeout
HALF_OPEN_HOLD_S = 15.0  # half-open connections are held this long at most
HALF_OPEN = 1000  # connections an episode holds half-open ...
# ... and episodes that may hold them at once, over all workers (forked: one semaphore):
# 2,000 connections in handshake, whatever the workers' luck.
_HALF_OPEN_SLOTS = multiprocessing.get_context("fork").BoundedSemaphore(2)
METADATA_REQUEST = build(
    request_type(METADATA, 12),
    topics=None,
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=False,
)
Episode = Callable[[Targets, random.Random], Counter[str]]


def _open(targets: Targets, listener: str, timeout: float = 5.0) -> socket.socket | None:
    try:
        return connect(targets, listener, timeout)
    except OSError:
        time.sleep(0.05)  # broker busy or refusing: let it breathe
        return None


def _send(sock: socket.socket, frames: list[bytes]) -> int:
    """Write ``frames``; how many went out whole before the broker closed or stalled."""
    sent = 0
    try:
        for frame in frames:
            sock.sendall(frame)
            sent += 1
    except OSError:
        pass
    return sent


def _drain(sock: socket.socket, seconds: float) -> bool:
    """Read until the broker closes (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return True
    except (TimeoutError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    return False


def _finish(sock: socket.socket, rng: random.Random) -> None:
    if rng.random() < DRAIN_SHARE:
        _drain(sock, DRAIN_S)
    sock.close()


def _mechanisms(listener: str) -> tuple[str, ...]:
    return ("OAUTHBEARER",) if listener == JWT else MECHANISMS


def _sign(targets: Targets, listener: str) -> Signer | None:
    return signer(targets.jwt_key_pem) if listener == JWT else None


def sasl_tokens(targets: Targets, rng: random.Random) -> Counter[str]:
    """SaslHandshake v0 or v1 (mostly of an enabled mechanism, sometimes of garbage), then
    hostile tokens in the framing it chose (raw, SaslAuthenticate v0-2), sometimes an
    oversize one or a size prefix that lies; for SCRAM, often a valid client-first whose
    server-first is read, then a hostile client-final."""
    listener = rng.choice(SASL_LISTENERS)
    sock = _open(targets, listener)
    if sock is None:
        return Counter()
    mechanisms = _mechanisms(listener)
    mechanism = rng.choice(mechanisms) if rng.random() < 0.9 else rng.choice(BAD_MECHANISMS)
    handshake_version = rng.choice((0, 1))
    version = None if handshake_version == 0 else rng.randint(0, 2)
    frames = []
    if rng.random() < 0.3:
        frames.append(sized(header(API_VERSIONS, 0, 0)))
    frames.append(handshake_frame(handshake_version, mechanism, 1))
    if mechanism.startswith("SCRAM-") and rng.random() < 0.4:
        return Counter({"sasl_tokens": _scram_final(sock, frames, version, mechanism, rng)})
    roll = rng.random()
    if roll < 0.05:
        frames.append(token_frame(version, b"x" * OVERSIZE, 2))
    elif roll < 0.08:
        frames.append(b"\x7f\xff\xff\xff" + b"n,,n=alice,r=abc")
    else:
        now = int(time.time())
        token = mechanism_token(rng, mechanism, USERS, now, _sign(targets, listener))
        frames.append(token_frame(version, token, 2))
        if rng.random() < 0.4:  # OAUTHBEARER's error acknowledgement, or more of the same
            follow = rng.choice((b"\x01", b"", token[:100], None))
            frames.append(token_frame(version, follow, 3))
    sent = _send(sock, frames)
    _finish(sock, rng)
    return Counter({"sasl_tokens": sent})


def _scram_final(
    sock: socket.socket,
    frames: list[bytes],
    version: int | None,
    mechanism: str,
    rng: random.Random,
) -> int:
    """A valid client-first, the server-first read, then a hostile client-final."""
    user = rng.choice(sorted(USERS))
    first = f"n,,n={user},r=fuzz{rng.randrange(1 << 30)}".encode()
    client = SocketWireClient(sock)
    sent = _send(sock, [*frames, token_frame(version, first, 2)])
    try:
        sock.settimeout(5.0)
        for _ in frames:  # the answers to ApiVersions and SaslHandshake
            client.read_frame()
        if version is None:
            server_first = client.read_frame()
        else:
            server_first = client.read_response(SASL_AUTHENTICATE, version, 2).auth_bytes
        nonce = dict(p.split("=", 1) for p in server_first.decode().split(","))["r"]
    except (OSError, ValueError, KeyError, AssertionError):
        sock.close()
        return sent
    size = 64 if mechanism.endswith("512") else 32  # the proof is one digest
    sent += _send(sock, [token_frame(version, scram_final(rng, nonce, size), 3)])
    _finish(sock, rng)
    return sent


def pre_auth_requests(targets: Targets, rng: random.Random) -> Counter[str]:
    """Requests before authentication: any API (valid or mutated bodies), a pipelining flood,
    random bytes, SaslAuthenticate before any handshake, two handshakes, two ApiVersions,
    other requests between the handshake and the token; on SSL, without a certificate."""
    listener = rng.choice((*SASL_LISTENERS, SSL))
    sock = _open(targets, listener)
    if sock is None:
        return Counter()
    mechanism = rng.choice(_mechanisms(listener))
    kind = rng.randrange(6)
    frames: list[bytes]
    if kind == 0:
        frames = schema_bodies(rng)
    elif kind == 1:
        frames = pipelining_flood(rng)[: rng.choice((10, 2000))]
    elif kind == 2:
        frames = random_bytes(rng)
    elif kind == 3:
        frames = [authenticate_frame(rng.randint(0, 2), b"\0alice\0alice-secret", 1)]
    elif kind == 4:
        frames = [handshake_frame(1, mechanism, 1), handshake_frame(1, mechanism, 2)]
    else:
        frames = [
            sized(header(API_VERSIONS, 0, 0)),
            sized(header(API_VERSIONS, 0, 1)),
            handshake_frame(1, mechanism, 2),
            *schema_bodies(rng),
        ]
    sent = _send(sock, frames)
    _finish(sock, rng)
    return Counter({"pre_auth_requests": sent})


def auth_flood(targets: Targets, rng: random.Random) -> Counter[str]:
    """Many authentications in a row on one listener: bad ones pipelined on up to 30
    connections at once (wrong passwords, unknown users, expired tokens), or good ones one
    after another, each followed by a Metadata request. A good login the broker refuses
    is noted."""
    listener = rng.choice(SASL_LISTENERS)
    count = rng.randint(5, 30)
    notes: Counter[str] = Counter()
    if rng.random() < 0.5:
        for _ in range(count):
            notes["auth_flood"] += 1
            notes[_good_login(targets, listener, rng)] += 1
        return notes
    socks = []
    for _ in range(count):
        sock = _open(targets, listener)
        if sock is None:
            continue
        mechanism = rng.choice(_mechanisms(listener))
        if mechanism == "PLAIN":
            user = rng.choice(sorted(USERS))
            token = f"\0{user}\0wrong-{rng.randrange(1000)}".encode()
        elif mechanism.startswith("SCRAM-"):
            token = scram_first(rng, [f"nobody-{rng.randrange(1000)}"])
        else:
            now = int(time.time())
            token = f"n,,\x01auth=Bearer {_expired(targets, listener, now)}\x01\x01".encode()
        frames = [handshake_frame(1, mechanism, 1), authenticate_frame(2, token, 2)]
        notes["auth_flood"] += _send(sock, frames) // 2
        socks.append(sock)
    _wait_closed(socks, DRAIN_S * 3)
    return notes


def _expired(targets: Targets, listener: str, now: int) -> str:
    claims = b'{"sub":"fuzz","aud":"gregor-fuzz","iat":%d,"exp":%d}' % (now - 120, now - 60)
    sign = _sign(targets, listener)
    return sign(b'{"alg":"RS256","kid":"k1"}', claims) if sign else unsecured_jwt(claims)


def _good_login(targets: Targets, listener: str, rng: random.Random) -> str:
    """One well-behaved login and a Metadata request: the note to count."""
    mechanism = rng.choice(_mechanisms(listener))
    user = rng.choice(sorted(USERS))
    sign = (lambda: signer(targets.jwt_key_pem)) if listener == JWT else None
    sock = _open(targets, listener)
    if sock is None:
        return "good logins that could not connect"
    client = SocketWireClient(sock)
    try:
        login(client, mechanism_client(mechanism, user, sign))
        call(client, METADATA_REQUEST)
        return "good logins served"
    except (OSError, ValueError, AssertionError):
        return "good logins refused or failed"
    finally:
        client.close()


def _wait_closed(socks: list[socket.socket], seconds: float) -> int:
    """Read every socket until the broker closes it or ``seconds`` pass, then close all;
    how many the broker closed. (epoll, not select: descriptors go past 1024.)"""
    deadline = time.monotonic() + seconds
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while selector.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if sock.recv(65536):
                        continue
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    pass
                selector.unregister(sock)
                closed += 1
    for sock in socks:
        sock.close()
    return closed


def reauth_abuse(targets: Targets, rng: random.Random) -> Counter[str]:
    """A good PLAIN login, then re-authentication abuse: handshakes pipelined by the dozen,
    another mechanism, another principal, hostile tokens, the v0 raw framing; sometimes a
    request once the session (REAUTH_MS) has expired; on SASL_SSL (no session lifetime) a
    handshake after authentication."""
    listener = SASL_PLAINTEXT if rng.random() < 0.8 else SASL_SSL
    sock = _open(targets, listener)
    if sock is None:
        return Counter()
    client = SocketWireClient(sock)
    try:
        login(client, mechanism_client("PLAIN", "alice"))
    except (OSError, ValueError, AssertionError):
        client.close()
        return Counter({"good logins refused or failed": 1})
    kind = rng.randrange(7)
    good = b"\0alice\0alice-secret"
    frames: list[bytes]
    if kind == 0:
        frames = []
        for i in range(rng.choice((2, 20, 100))):
            frames += [
                handshake_frame(1, "PLAIN", 10 + 2 * i),
                authenticate_frame(2, good, 11 + 2 * i),
            ]
    elif kind == 1:
        mechanism = rng.choice(("SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"))
        frames = [handshake_frame(1, mechanism, 10), authenticate_frame(2, good, 11)]
    elif kind == 2:
        frames = [handshake_frame(1, "PLAIN", 10), authenticate_frame(2, b"\0bob\0bob-secret", 11)]
    elif kind == 3:
        frames = [
            handshake_frame(1, "PLAIN", 10),
            authenticate_frame(2, plain_token(rng, USERS), 11),
        ]
    elif kind == 4:
        frames = [
            handshake_frame(0, "PLAIN", 10),
            sized(rng.choice((good, plain_token(rng, USERS)))),
        ]
    elif kind == 5 and rng.random() < 0.3:
        time.sleep(REAUTH_MS / 1000 + 0.2)
        frames = [sized(header(METADATA, 1, 10) + b"\xff\xff\xff\xff")]
    else:
        frames = [handshake_frame(1, "PLAIN", 10)]
    sent = _send(sock, frames)
    _finish(sock, rng)
    return Counter({"reauth_abuse": sent})


def tls_garbage(targets: Targets, rng: random.Random) -> Counter[str]:
    """Garbage TLS records and broken handshakes on a TLS port (``tls_records.garbage``),
    or, after a complete handshake on SASL_SSL, bytes that are not TLS records at all."""
    listener = rng.choice(TLS_LISTENERS)
    if rng.random() < 0.2:
        sock = _open(targets, SASL_SSL)
        if sock is None:
            return Counter()
        raw = socket.socket(fileno=sock.detach())  # the TLS session's TCP socket, bare
        writes = [
            rng.choice((rng.randbytes(300), client_hello(), sized(header(API_VERSIONS, 0, 1))))
        ]
    else:
        try:
            raw = socket.create_connection(("127.0.0.1", targets.ports[listener]), timeout=5.0)
        except OSError:
            return Counter()
        writes = garbage(rng)
    sent = _send(raw, writes)
    _finish(raw, rng)
    return Counter({"tls_garbage": sent})


def slowloris(targets: Targets, rng: random.Random) -> Counter[str]:
    """20 to 80 connections dribbling a ClientHello (or, on SASL_PLAINTEXT, a SaslHandshake
    and a token) a byte per SLOW_STEP_S each, for SLOW_S: the broker must close the TLS
    ones at its handshake timeout and keep serving everyone else."""
    listener = rng.choice((*TLS_LISTENERS, SASL_PLAINTEXT))
    tls = targets.is_tls(listener)
    payload = (
        client_hello()
        if tls
        else handshake_frame(1, "PLAIN", 1) + authenticate_frame(2, b"\0alice\0alice-secret", 2)
    )
    socks = []
    for _ in range(rng.randint(20, 80)):
        try:
            sock = socket.create_connection(("127.0.0.1", targets.ports[listener]), timeout=2.0)
        except OSError:
            continue
        sock.setblocking(False)
        socks.append(sock)
    opened, closed = len(socks), 0
    start = time.monotonic()
    step = 0
    while socks and time.monotonic() - start < SLOW_S:
        alive = []
        for sock in socks:
            try:
                if step < len(payload):
                    sock.send(payload[step : step + 1])
                if sock.recv(65536) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
                sock.close()
                continue
            alive.append(sock)
        socks = alive
        step += 1
        time.sleep(SLOW_STEP_S)
    for sock in socks:
        sock.close()
    notes = Counter({"slowloris": opened})
    if tls:
        notes["slowloris TLS connections"] = opened
        notes["slowloris TLS connections closed by the broker"] = closed
    return notes


def half_open_tls(targets: Targets, rng: random.Random) -> Counter[str]:
    """HALF_OPEN TCP connections to a TLS port that send nothing, half a ClientHello, or
    all of it and never finish the handshake, held until the broker closes them (its 10 s
    TLS handshake timeout) or HALF_OPEN_HOLD_S pass; none if two such episodes are running
    already (the worker picks another family)."""
    if not _HALF_OPEN_SLOTS.acquire(block=False):
        return Counter({"half-open episodes skipped (two running)": 1})
    try:
        return _half_open(targets, rng)
    finally:
        _HALF_OPEN_SLOTS.release()


def _half_open(targets: Targets, rng: random.Random) -> Counter[str]:
    listener = rng.choice(TLS_LISTENERS)
    hello = client_hello()
    socks = []
    for _ in range(HALF_OPEN):
        try:
            sock = socket.create_connection(("127.0.0.1", targets.ports[listener]), timeout=2.0)
        except OSError:
            break
        part = rng.choice((b"", hello[: len(hello) // 2], hello))
        try:
            sock.sendall(part)
        except OSError:
            pass
        socks.append(sock)
    opened = len(socks)
    closed = _wait_closed(socks, HALF_OPEN_HOLD_S)
    return Counter(
        {
            "half_open_tls": opened,
            "half-open TLS connections": opened,
            "half-open TLS connections closed by the broker in time": closed,
        }
    )


# Family name -> (episode, share of episodes): shares set so that the long episodes
# (slowloris 13 s, half-open 15 s, floods ~1 s) take about a fifth of the time each.
SECURED_FAMILIES: dict[str, tuple[Episode, float]] = {
    "sasl_tokens": (sasl_tokens, 0.40),
    "pre_auth_requests": (pre_auth_requests, 0.20),
    "tls_garbage": (tls_garbage, 0.25),
    "auth_flood": (auth_flood, 0.02),
    "reauth_abuse": (reauth_abuse, 0.05),
    "slowloris": (slowloris, 0.001),
    "half_open_tls": (half_open_tls, 0.001),
}
