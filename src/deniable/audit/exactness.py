"""The audit's exact checks: enumerate every random word a sampler can draw, and read the
client's source for float randomness.

- ``enumerate_ones``: P(report 1 | true bit) of a randomized response, summed over every
  sequence of random words its ``perturb`` can draw (exact Fractions, no sampling).
- ``enumerate_coin``: the same for a ``ByteCoin`` over every byte sequence.
- ``enumerate_draws``: every sequence of draws (random words, ``below(n)`` integers) a
  value-free sampler can make, with its outcome and exact probability; ``replay`` runs a
  sampler on one such sequence.
- ``float_random_uses``: imports or calls of a float random source in the perturbing modules.
- ``random_source_problems``: why the random source in use is not the OS CSPRNG.
"""
from __future__ import annotations

import ast
import heapq
import importlib.util
import itertools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from deniable.client import randomness
from deniable.client.categorical import ByteCoin
from deniable.client.mechanism import RandomizedResponse
from deniable.client.randomness import RandomBits, SecureBits

Words = tuple[tuple[int, int], ...]
"""A sequence of random words as a sampler read them: (value, width in bits) each."""

PERTURBING_MODULES = ("mechanism", "memo", "pool", "longitudinal", "randomness", "composition",
                      "categorical", "numeric", "open_domain")
"""The client modules on the path from a true value to a reported bit (scanned for floats)."""
_FLOAT_RANDOM_CALLS = frozenset({"random", "uniform", "gauss", "normalvariate", "betavariate",
                                 "expovariate", "triangular", "vonmisesvariate", "rand",
                                 "random_sample", "SystemRandom"})
_MAX_ENUMERATED_PATHS = 1 << 20
_MAX_ENUMERATED_WORDS = 64


class _NeedBits(Exception):
    def __init__(self, k: int) -> None:
        self.k = k


class _Script:
    """A random source that replays chosen words, then asks for the next one (or, with a
    ``tail``, answers every later draw with that value)."""

    def __init__(self, words: Words, tail: int | None = None) -> None:
        self._words = words
        self._next = 0
        self._tail = tail

    def bits(self, k: int) -> int:
        if self._next == len(self._words):
            if self._tail is not None:
                return self._tail
            raise _NeedBits(k)
        value, width = self._words[self._next]
        if width != k:
            raise AssertionError(f"the sampler asked for {k} bits, then {width}")
        self._next += 1
        return value


def enumerate_ones(mechanism: RandomizedResponse, true_bit: int,
                   max_paths: int = _MAX_ENUMERATED_PATHS,
                   max_words: int = _MAX_ENUMERATED_WORDS) -> tuple[Fraction, Fraction]:
    """P(report 1 | true_bit) over every sequence of random words ``perturb`` can draw.

    Returns:
        (probability of a 1 among the sequences that finished, probability of the sequences
        not followed to the end): the exact probability lies in [first, first + second]. The
        second is 0 when the sampler always stops within ``max_paths`` sequences of at most
        ``max_words`` words, as every sampler of power-of-two denominators does; a rejection
        sampler (other denominators) leaves the tiny mass of its longest rejection runs.
    """
    ones = Fraction(0)
    unfinished = Fraction(0)
    stack: list[tuple[tuple[int, int], ...]] = [()]
    paths = 0
    while stack:
        words = stack.pop()
        weight = Fraction(1, 1 << sum(width for _, width in words))
        try:
            output = mechanism.perturb(true_bit, _Script(words))
        except _NeedBits as need:
            if len(words) >= max_words or paths + (1 << need.k) > max_paths:
                unfinished += weight
                continue
            paths += 1 << need.k
            stack.extend(words + ((value, need.k),) for value in range(1 << need.k))
            continue
        if output not in (0, 1):
            raise AssertionError(f"{mechanism.id} reported {output!r}, not a bit")
        ones += weight * output
    return ones, unfinished


def coin_problems(p: Fraction, d: int | None = None) -> tuple[list[str], list[str]]:
    """The fast sampler's coin (``ByteCoin(p)``) over every byte it can read and, for a GRR
    over ``d`` <= 256 categories, its map from a byte to the other categories.

    Returns:
        (problems, notes): empty problems when the coin shows 1 with probability p (within
        the mass a 6-byte enumeration leaves undecided) and the map is uniform.
    """
    problems: list[str] = []
    drawn, unread = enumerate_coin(p)
    if not drawn <= p <= drawn + unread:
        problems.append(f"its coin draws 1 with probability in [{drawn}, {drawn + unread}]"
                        f", the id claims {p}")
    notes = [f"coin exact{'' if not unread else f' within {float(unread):.0e}'}"]
    if d is not None and d <= 256:
        m = d - 1
        limit = 256 - 256 % m
        hits = Counter(1 + b % m for b in range(limit))
        if set(hits.values()) != {limit // m} or set(hits) != set(range(1, d)):
            problems.append("the other-category map is not uniform")
    return problems, notes


def float_random_uses(modules: Sequence[str] = PERTURBING_MODULES) -> list[str]:
    """Imports of a float random source, or calls of one, in the perturbing client modules."""
    findings: list[str] = []
    for name in modules:
        spec = importlib.util.find_spec(f"deniable.client.{name}")
        if spec is None or spec.origin is None:
            findings.append(f"deniable.client.{name} not found")
            continue
        tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.split(".")[0] in ("random", "numpy")]
            elif isinstance(node, ast.ImportFrom):
                bad = [node.module or ""] if (node.module or "").split(".")[0] in (
                    "random", "numpy") else []
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else (
                    func.id if isinstance(func, ast.Name) else "")
                bad = [f"{called}()"] if called in _FLOAT_RANDOM_CALLS else []
            else:
                continue
            findings.extend(f"{name}.py:{node.lineno}: {b}" for b in bad)
    return findings


def random_source_problems(rng: RandomBits | None) -> list[str]:
    """Why the random source in use is not the OS CSPRNG (empty when it is)."""
    problems: list[str] = []
    import posix  # the C function os.urandom must be
    if os.urandom is not posix.urandom:
        problems.append("os.urandom has been replaced")
    system = randomness.SYSTEM_BITS
    if getattr(system, "_read", None) is not os.urandom:
        problems.append("the client's system source does not read os.urandom")
    if rng is not None and not (isinstance(rng, SecureBits)
                                and getattr(rng, "_read", None) is os.urandom):
        problems.append(f"an injected random source ({type(rng).__name__}) is in use, "
                        f"not the OS CSPRNG")
    return problems


def enumerate_coin(p: Fraction, levels: int = 6) -> tuple[Fraction, Fraction]:
    """P(a ``ByteCoin(p)`` shows 1) over every byte sequence of at most ``levels`` bytes:
    (probability of 1 among decided sequences, mass left undecided)."""
    coin = ByteCoin(p)
    ones, unread = Fraction(0), Fraction(0)
    stack: list[tuple[int, ...]] = [()]
    while stack:
        prefix = stack.pop()
        for b in range(256):
            values = prefix + (b,)
            served = list(values[1:])

            def draw(k: int) -> bytes:
                if len(served) < k:
                    raise _NeedBits(8)
                out = bytes(served[:k])
                del served[:k]
                return out
            weight = Fraction(1, 256 ** len(values))
            try:
                mark = coin.decide(bytes(values[:1]), draw)
            except _NeedBits:
                if len(values) >= levels:
                    unread += weight
                else:
                    stack.append(values)
                continue
            ones += weight * (mark == b"1")
    return ones, unread


Draws = tuple[tuple[str, int, int], ...]
"""The draws a value-free sampler made, in order: ("bits", k, value) for a word of k bits,
("below", n, value) for a uniform integer in [0, n) from ``below``."""


class _NeedDraw(Exception):
    def __init__(self, kind: str, size: int) -> None:
        self.kind, self.size = kind, size

    @property
    def outcomes(self) -> int:
        return 1 << self.size if self.kind == "bits" else self.size


class _DrawScript(SecureBits):
    """A random source that serves recorded draws, then asks for the next one (or, with a
    ``tail``, answers every later draw with that value). It is a ``SecureBits``, so
    ``deniable.client.mechanism.below`` asks it for a uniform integer below n at once
    (``below``), which it serves as one of n equally likely outcomes: the client's rejection
    sampler is exact by construction, and enumerating its n outcomes keeps the enumeration
    finite whatever n is. It reads no entropy."""

    def __init__(self, draws: Draws, tail: int | None = None) -> None:  # no OS source
        self._draws = draws
        self._next = 0
        self._tail = tail

    def _serve(self, kind: str, size: int) -> int:
        if self._next == len(self._draws):
            if self._tail is not None:
                return self._tail
            raise _NeedDraw(kind, size)
        got_kind, got_size, value = self._draws[self._next]
        if (got_kind, got_size) != (kind, size):
            raise AssertionError(f"the sampler asked for {kind}({size}) where the recorded "
                                 f"draw is {got_kind}({got_size})")
        self._next += 1
        return value

    def bits(self, k: int) -> int:
        return self._serve("bits", k)

    def below(self, bound: int) -> int:
        return self._serve("below", bound)

    def discard(self) -> None:
        pass


@dataclass(frozen=True)
class DrawPath:
    """One sequence of draws a sampler made, its probability and what it gave."""

    draws: Draws
    probability: Fraction
    outcome: object


def enumerate_draws(draw: Callable[[RandomBits], object],
                    max_paths: int = _MAX_ENUMERATED_PATHS) -> tuple[list[DrawPath], Fraction]:
    """Every sequence of draws ``draw`` can make, heaviest first, with its outcome: each
    word of k bits at its 2**k values, each ``below(n)`` at its n values.

    Returns:
        (the paths followed to the end, the probability of the sequences not followed): the
        second is 0 when the draw always stops within ``max_paths`` runs (a sampler that
        rejects raw words itself leaves the mass of its longest runs).
    """
    done: list[DrawPath] = []
    unfinished = Fraction(0)
    order = itertools.count()
    heap: list[tuple[Fraction, int, Draws]] = [(Fraction(1), next(order), ())]  # 1 / P first
    runs = 0
    while heap:
        inverse, _, draws = heapq.heappop(heap)
        runs += 1
        try:
            outcome = draw(_DrawScript(draws))
        except _NeedDraw as need:
            if runs + len(heap) + need.outcomes > max_paths:
                unfinished += 1 / inverse
                continue
            for value in range(need.outcomes):
                heapq.heappush(heap, (inverse * need.outcomes, next(order),
                                      draws + ((need.kind, need.size, value),)))
            continue
        done.append(DrawPath(draws, 1 / inverse, outcome))
    return done, unfinished


def replay(sample: Callable[[RandomBits], object], draws: Draws, tail: int = 0) -> object:
    """``sample`` on a source that serves ``draws``, then ``tail`` for every later draw.

    Raises:
        AssertionError: the sampler asked for another draw than ``draws`` holds at that
            place (it does not read the randomness ``draws`` was drawn for).
    """
    return sample(_DrawScript(draws, tail))
