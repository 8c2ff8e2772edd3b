"""The server side of a TLS connection, driven by Gregor rather than asyncio's SSLProtocol.

``TlsTransport`` is the protocol of an accepted socket's plain transport and, once the
handshake is done, the transport its application protocol (``server/network.py``'s
Connection) reads and writes through. It runs an ``ssl.SSLObject`` over two memory BIOs:

- Reads land in one buffer the whole server shares (``read_buffer``), whose bytes go into
  the connection's incoming BIO at once. A connection holds no read buffer of its own
  (asyncio's gives each accepted connection 256 KiB before its handshake even starts:
  thousands of half-open connections would be hundreds of MB), and a read takes as much as
  the socket has, up to the shared buffer's size, instead of a fixed slice.
- The records read are decrypted straight into the application's own buffer (its
  ``get_buffer``, as BufferedProtocol), as many as fit, then handed over with one
  ``buffer_updated``: no intermediate copy and no trip around the event loop per buffer.
- Writes are encrypted at once and handed to the socket transport, whose write buffer
  and flow control (``pause_writing`` / ``resume_writing``) the application sees.

A close sends close_notify and does not wait for the peer's (as Kafka's
SslTransportLayer); writes still queued are given ``shutdown_timeout_s`` to drain.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from gregor.ratelimit import RateLimitedLog

limited_log = RateLimitedLog(logging.getLogger(__name__))

# As asyncio's TLS transport: the application is paused above this much unsent.
_WRITE_HIGH_WATER = 512 * 1024


class TlsTransport(asyncio.BufferedProtocol, asyncio.Transport):
    """One server-side TLS connection; ``handshake`` resolves once the handshake is done
    (the application protocol from ``app_factory`` is then connected) or failed (an
    ``ssl.SSLError``, ``TimeoutError`` after ``handshake_timeout_s``, or the OSError
    that closed the connection)."""

    def __init__(
        self,
        context: ssl.SSLContext,
        app_factory: Callable[[], asyncio.BufferedProtocol],
        read_buffer: memoryview,
        handshake_timeout_s: float,
        shutdown_timeout_s: float,
    ) -> None:
        super().__init__()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._app_factory = app_factory
        self._app: asyncio.BufferedProtocol | None = None
        self._read_buffer = read_buffer
        self._handshake_timeout_s = handshake_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._loop = asyncio.get_running_loop()
        self.handshake: asyncio.Future[None] = self._loop.create_future()
        self._raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._reading = True  # the application reads (pause_reading / resume_reading)
        self._draining = False  # a drain of the incoming BIO is scheduled
        self._closing = False

    # -- the socket transport's protocol ------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        transport.set_write_buffer_limits(_WRITE_HIGH_WATER)
        self._timer = self._loop.call_later(self._handshake_timeout_s, self._timed_out)
        self._handshake_step()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        # The shared buffer is reused by the next read of any connection: copy out now.
        self._incoming.write(self._read_buffer[:nbytes])
        if self._app is None:
            self._handshake_step()
        else:
            self._decrypt()

    def eof_received(self) -> bool:
        return False  # the client hung up without close_notify: close

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        if not self.handshake.done():
            self.handshake.set_exception(
                exc or ConnectionResetError("the client closed the connection")
            )
        elif self._app is not None:
            app, self._app = self._app, None
            app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    # -- handshake ----------------------------------------------------------------------
    def _handshake_step(self) -> None:
        if self.handshake.done():
            return
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except ssl.SSLError as e:
            self._flush()  # the alert, if OpenSSL made one
            self._fail(e)
            return
        self._flush()  # the server's last flight (and TLS 1.3 session tickets)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._app = self._app_factory()
        self.handshake.set_result(None)
        self._app.connection_made(self)
        self._decrypt()  # application data that came with the client's last flight

    def _timed_out(self) -> None:
        self._timer = None
        self._fail(
            TimeoutError(
                f"SSL handshake is taking longer than {self._handshake_timeout_s} seconds: "
                "aborting the connection"
            )
        )

    def _fail(self, error: Exception) -> None:
        """The handshake failed: the alert (if any) is sent, then the socket closed; a
        timed-out one is dropped at once."""
        if not self.handshake.done():
            self.handshake.set_exception(error)
        self._closing = True
        if self._raw is not None:
            if isinstance(error, TimeoutError):
                self._raw.abort()
            else:
                self._raw.close()

    # -- reading ------------------------------------------------------------------------
    def _decrypt(self) -> None:
        """Decrypt what the incoming BIO holds into the application's buffers while it
        reads, one ``buffer_updated`` per buffer filled."""
        app = self._app
        read = self._ssl.read
        while self._reading and app is not None and not self._closing:
            filled = 0
            with memoryview(app.get_buffer(-1)) as view:
                size = len(view)
                try:
                    while filled < size:
                        # Given a buffer, read() returns a count (typeshed: bytes).
                        count: int = read(size - filled, view[filled:])  # type: ignore[assignment]
                        if not count:  # close_notify
                            self.close()
                            break
                        filled += count
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    self.close()
                except ssl.SSLError as e:
                    self._abort_on(e)
                    return
            if filled:
                app.buffer_updated(filled)
            app = self._app
            if filled < size:
                break  # the incoming BIO is empty (or the stream ended)
        if self._outgoing.pending:  # a TLS 1.3 KeyUpdate answered, say
            self._flush()

    def _abort_on(self, error: ssl.SSLError) -> None:
        """A record that does not decrypt, or a fatal alert: the connection is over."""
        limited_log.log(
            "tls-record",
            logging.INFO,
            "Closing TLS connection from %s: %s",
            self.get_extra_info("peername"),
            error.reason or error,
        )
        self._flush()
        self.abort()

    def _drain(self) -> None:
        self._draining = False
        self._decrypt()

    # -- the transport the application sees ----------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        self._ssl.write(data)
        self._flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._closing:
            return
        for data in list_of_data:
            self._ssl.write(data)
        self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending and self._raw is not None and not self._raw.is_closing():
            self._raw.write(self._outgoing.read())

    def get_write_buffer_size(self) -> int:
        return 0 if self._raw is None else self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        assert self._raw is not None
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        assert self._raw is not None
        self._raw.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            if self._raw is not None and self._raw.is_reading():
                self._raw.pause_reading()

    def resume_reading(self) -> None:
        if self._reading or self._closing:
            return
        self._reading = True
        if self._raw is not None:
            self._raw.resume_reading()
        # Records read before the pause wait in the BIO: decrypt them on the next turn of
        # the loop, not from inside the application's own call.
        if not self._draining and (self._incoming.pending or self._ssl.pending()):
            self._draining = True
            self._loop.call_soon(self._drain)

    def is_closing(self) -> bool:
        return self._closing or self._raw is None or self._raw.is_closing()

    def close(self) -> None:
        """close_notify, then the socket closes once its queued writes are sent (or after
        the shutdown timeout)."""
        if self._closing or self._raw is None:
            return
        self._closing = True
        try:
            self._ssl.unwrap()
        except ssl.SSLError:
            pass  # the peer's close_notify is not awaited
        self._flush()
        raw = self._raw
        raw.close()
        if raw.get_write_buffer_size():
            self._loop.call_later(self._shutdown_timeout_s, raw.abort)

    def abort(self) -> None:
        self._closing = True
        if self._raw is not None:
            self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl
        if name == "peercert":
            return self._ssl.getpeercert()
        if name == "cipher":
            return self._ssl.cipher()
        if name == "sslcontext":
            return self._ssl.context
        return default if self._raw is None else self._raw.get_extra_info(name, default)
