"""Share sessions (replica/share_session.py): epochs, the limit, forgotten partitions and
the sessions a closed connection takes with it."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from gregor.replica.share_session import FINAL_EPOCH, ShareSessionCache

T = uuid.uuid4()


def test_a_session_opens_at_epoch_zero_and_continues_at_each_next_epoch() -> None:
    cache = ShareSessionCache(10)
    session, replaced, error = cache.open("g", "m", "conn", [(T, 0), (T, 1)])
    assert error == ErrorCode.none and replaced is None and session is not None
    assert session.epoch == 1
    assert cache.continued("g", "m", 2) == (None, ErrorCode.invalid_share_session_epoch)
    continued, error = cache.continued("g", "m", 1)
    assert continued is session and error == ErrorCode.none
    continued.update([(T, 2)], [(T, 0)])
    assert list(session.partitions) == [(T, 1), (T, 2)]
    assert cache.continued("g", "m", 1) == (None, ErrorCode.invalid_share_session_epoch)
    assert cache.continued("g", "m", 2)[0] is session


def test_unknown_sessions_and_closing() -> None:
    cache = ShareSessionCache(10)
    assert cache.continued("g", "m", 1) == (None, ErrorCode.share_session_not_found)
    session, _, _ = cache.open("g", "m", "conn", [])
    closed, error = cache.continued("g", "m", FINAL_EPOCH)
    assert closed is session and error == ErrorCode.none
    assert cache.get("g", "m") is None
    assert cache.continued("g", "m", FINAL_EPOCH) == (None, ErrorCode.share_session_not_found)


def test_the_limit_refuses_new_sessions_but_not_a_reopened_one() -> None:
    cache = ShareSessionCache(1)
    first, _, _ = cache.open("g", "a", "c1", [])
    assert cache.open("g", "b", "c2", []) == (None, None, ErrorCode.share_session_limit_reached)
    again, replaced, error = cache.open("g", "a", "c1", [(T, 0)])
    assert error == ErrorCode.none and replaced is first and again is not first
    assert len(cache) == 1


def test_a_closed_connection_takes_its_sessions() -> None:
    cache = ShareSessionCache(10)
    a, _, _ = cache.open("g", "a", "c1", [])
    b, _, _ = cache.open("h", "a", "c1", [])
    c, _, _ = cache.open("g", "c", "c2", [])
    assert {(s.group_id, s.member_id) for s in cache.connection_closed("c1")} == {
        ("g", "a"),
        ("h", "a"),
    }
    assert cache.get("g", "a") is None and cache.get("g", "c") is c
    assert cache.connection_closed("c1") == []
    # a session reopened on another connection belongs to that one
    cache.open("g", "c", "c3", [])
    assert cache.connection_closed("c2") == []
    assert cache.get("g", "c") is not None
    assert a is not b
