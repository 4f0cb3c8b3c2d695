"""Request ids are random version-4 UUIDs in canonical form, never repeated, not even by a fork."""

from __future__ import annotations

import os
import uuid

from gateway.request_ids import new_request_id


def test_ids_are_canonical_random_uuid4s() -> None:
    ids = [new_request_id() for _ in range(20_000)]  # several refills of the random pool
    assert len(set(ids)) == len(ids)
    for text in ids[:600]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text
    # every non-fixed bit varies: the pool is not reused or zero
    assert len({text[14] for text in ids}) == 1 and len({text[19] for text in ids}) == 4
    assert len({text[0] for text in ids}) == 16


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    new_request_id()  # the pool now holds ids the parent has not handed out yet
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        os.write(write_fd, new_request_id().encode())
        os._exit(0)
    os.close(write_fd)
    _, status = os.waitpid(child, 0)
    child_id = os.read(read_fd, 64).decode()
    os.close(read_fd)
    assert status == 0 and uuid.UUID(child_id).version == 4
    assert child_id != new_request_id()
