"""The secure bit source: uniform, thread-safe, never shared across a fork."""
from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from deniable.client.randomness import SecureBits


def test_bits_are_uniform_over_their_range() -> None:
    source = SecureBits()
    draws = Counter(source.bits(3) for _ in range(80_000))
    assert set(draws) == set(range(8))
    for count in draws.values():  # expected 10,000, sd ~94
        assert abs(count - 10_000) < 500


def test_below_is_uniform_without_modulo_bias() -> None:
    source = SecureBits()
    draws = Counter(source.below(3) for _ in range(60_000))
    assert set(draws) == {0, 1, 2}
    for count in draws.values():  # expected 20,000, sd ~115
        assert abs(count - 20_000) < 600


def test_bits_come_from_the_injected_source_in_blocks() -> None:
    reads: list[int] = []

    def read(n: int) -> bytes:
        reads.append(n)
        return bytes([0b10110100]) * n

    source = SecureBits(read)
    assert [source.bits(2) for _ in range(4)] == [0b00, 0b01, 0b11, 0b10]
    assert reads == [4096]


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        SecureBits().bits(65)
    with pytest.raises(ValueError):
        SecureBits().below(0)


def test_threads_never_share_bits() -> None:
    counter = iter(range(10**9))

    def read(n: int) -> bytes:  # every 64-bit word is distinct, so duplicates mean sharing
        return b"".join(next(counter).to_bytes(8, "little") for _ in range(n // 8))

    source = SecureBits(read)
    results: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [source.bits(64) for _ in range(5000)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20_000 == len(set(results))


def test_a_forked_child_discards_the_parents_buffered_bits() -> None:
    source = SecureBits()
    source.bits(1)  # the parent now holds buffered bits
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next 64 bits
        os.close(read_fd)
        os.write(write_fd, source.bits(64).to_bytes(8, "little"))
        os._exit(0)
    os.close(write_fd)
    child_bits = int.from_bytes(os.read(read_fd, 8), "little")
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert source._avail > 0  # the parent's buffer is intact...
    parent_bits = source.bits(63)
    # ...and the child did not draw the same 63 bits the parent draws next.
    assert (child_bits & ((1 << 63) - 1)) != parent_bits
