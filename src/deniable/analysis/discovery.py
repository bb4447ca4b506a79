"""Discovery of frequent strings from an open-domain metric's counters (``od:`` mechanism).

The counters of ``deniable.client.open_domain.OpenDomainSketch`` hold, for each prefix level l,
seed s and bucket y, how many reports named that cell. For a candidate prefix x of level l,

    C_x = sum_s counter[l, s, h_{l,s}(x)],   E[C_x] = n_l (1/g + f_x (p - 1/g))

(up to the fixed family's collision bias, see docs/discovery.md), with n_l the level's reports
and f_x the share of devices whose string starts with x. So

    f_x = (C_x / n_l - 1/g) / (p - 1/g),   Var = pi (1 - pi) / (n_l (p - 1/g)^2),
    pi = 1/g + f_x (p - 1/g)   (binomial over the level's reports).

Decoding is prefix extension (PEM): level 0 tries every first ``step`` bytes; each next level
extends the ``keep`` prefixes of the one before with the largest estimates by every ``step``
bytes. An extension ending in NUL (the padding) is a *complete* string of fewer than
``max_bytes`` bytes, as is every extension at the last level. A complete string x created at
level l is never dropped: every level from l on counts it (its prefix there is x padded), and
all of those levels estimate the same share f_x, so its estimate pools them (counts and
reports summed: still unbiased, binomial, with their reports together).

**What is shown.** A complete string created at level l was built from parents chosen on levels
before l only, and is judged on levels l and after only: independent reports. So the
Bonferroni correction over ``tested`` (every complete string created) is valid: a string is
*discovered* when its one-sided lower bound share - z stderr is above zero with
z = Phi^-1(1 - (1 - confidence) / tested), and with probability at least ``confidence`` no
string whose true share is 0 is shown (up to the fixed family's bias). ``min_share`` is the
share of a ``max_bytes``-long string discovered half the time: z times its standard error at
share 0 (shorter strings pool more levels and are seen smaller; all must also survive the
beam at each earlier level, see docs/discovery.md).

Cost: candidates x seeds hash evaluations per level, numpy uint64 (wrapping) arithmetic;
independent of n. Memory: the counters (8 bytes x width) plus chunks of 2**21 evaluations
(about 70 MiB of numpy buffers at the peak, measured by bench/discovery.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from deniable.client.errors import InvalidParameterError
from deniable.client.open_domain import OpenDomainSketch, decode_string, hash_constants

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
_CHUNK = 1 << 21  # hash evaluations per numpy step (16 MB of uint64)


@dataclass(frozen=True)
class Found:
    """One string with its estimated share of devices and a simultaneous interval.

    Attributes:
        string: the discovered string (NFC).
        share: unbiased estimate of the share of devices holding it (may lie outside [0, 1]).
        lower, upper: share -/+ z standard errors, z the Bonferroni quantile (``Discovery.z``).
    """

    string: str
    share: float
    lower: float
    upper: float


@dataclass(frozen=True)
class Discovery:
    """The outcome of ``discover``.

    Attributes:
        mechanism: the ``od:`` id.
        n: reports (counter slot 0); n_per_level: reports per prefix level, shape (levels,).
        found: strings whose lower bound is above 0, largest share first.
        ranked: every whole-string candidate of the last level, largest share first (found is
            its head; the rest are not evidence of anything).
        tested: whole-string candidates scored at the last level (the Bonferroni count).
        confidence: the family-wise confidence of ``found``; z: the one-sided quantile used.
        min_share: the share that is discovered half the time at this n and epsilon.
    """

    mechanism: str
    n: int
    n_per_level: tuple[int, ...]
    found: tuple[Found, ...]
    ranked: tuple[Found, ...]
    tested: int
    confidence: float
    z: float
    min_share: float


def level_counters(sketch: OpenDomainSketch, counters: NDArray[np.integer]) -> IntArray:
    """The counters as an array of shape (levels, seeds, g), after checking slot 0.

    Raises:
        InvalidParameterError: a counter array of the wrong length or with negative entries.
    """
    array = np.asarray(counters, dtype=np.int64)
    if array.shape != (sketch.width,):
        raise InvalidParameterError(
            f"counters must have shape ({sketch.width},) for {sketch.id}. "
            f"Got {array.shape} instead.")
    if (array < 0).any():
        raise InvalidParameterError("counters must be non-negative")
    cells = array[1:].reshape(sketch.levels, sketch.seeds, sketch.g)
    if int(cells.sum()) != int(array[0]):
        raise InvalidParameterError(
            f"slot 0 ({int(array[0])} reports) must equal the sum of the cells "
            f"({int(cells.sum())})")
    return cells


def _constants(sketch: OpenDomainSketch, level: int, words: int) -> NDArray[np.uint64]:
    table = [hash_constants(level, seed, words + 1) for seed in range(sketch.seeds)]
    return np.array(table, dtype=np.uint64)  # (seeds, words + 1)


def _words(prefixes: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """(N, length) bytes -> (N, ceil(length / 4)) little-endian 32-bit words, as uint64."""
    n, length = prefixes.shape
    padded = np.zeros((n, -(-length // 4) * 4), dtype=np.uint8)
    padded[:, :length] = prefixes
    return padded.view("<u4").astype(np.uint64)


def buckets(sketch: OpenDomainSketch, level: int, prefixes: NDArray[np.uint8],
            seeds: slice | None = None) -> NDArray[np.int64]:
    """h_{level,s}(x) for every seed s (rows) and prefix x (columns): the numpy twin of
    ``deniable.client.open_domain.bucket``, shape (seeds, N)."""
    words = _words(prefixes)
    table = _constants(sketch, level, words.shape[1])
    if seeds is not None:
        table = table[seeds]
    h = np.repeat(table[:, :1], words.shape[0], axis=1)  # (S, N), wraps mod 2**64
    for i in range(words.shape[1]):
        h += table[:, i + 1:i + 2] * words[:, i][None, :]
    top = h >> np.uint64(32)
    return ((top * np.uint64(sketch.g)) >> np.uint64(32)).astype(np.int64)


def prefix_counts(sketch: OpenDomainSketch, cells: IntArray, level: int,
                  prefixes: NDArray[np.uint8]) -> IntArray:
    """C_x for each prefix x of ``level`` (shape (N,)): the sum over seeds of its cell."""
    total = np.zeros(prefixes.shape[0], dtype=np.int64)
    if prefixes.shape[0] == 0:
        return total
    per = max(1, _CHUNK // prefixes.shape[0])
    for start in range(0, sketch.seeds, per):
        chosen = slice(start, min(sketch.seeds, start + per))
        rows = np.arange(chosen.start, chosen.stop)[:, None]
        total += cells[level][rows, buckets(sketch, level, prefixes, chosen)].sum(axis=0)
    return total


def extension_counts(sketch: OpenDomainSketch, cells: IntArray, level: int,
                     parents: NDArray[np.uint8], ext: NDArray[np.uint8]) -> IntArray:
    """C_x for every x = parent + extension (shape (P, X)), faster than ``prefix_counts``.

    The hash is linear in the words, and an extension only fills zero bytes of the parent's
    padded words, so h(parent + e) = h(parent) + sum_j a_{word j} (e_j << 8 (j mod 4)),
    mod 2**64: one multiply-add per candidate and seed instead of one per word.
    """
    length = parents.shape[1] + ext.shape[1]
    words = -(-length // 4)
    table = _constants(sketch, level, words)  # (seeds, words + 1)
    padded = np.zeros((parents.shape[0], length), dtype=np.uint8)
    padded[:, :parents.shape[1]] = parents
    parent_words = _words(padded)  # (P, words), the new bytes zero
    added = np.zeros((sketch.seeds, ext.shape[0]), dtype=np.uint64)  # (seeds, X)
    for j in range(ext.shape[1]):
        position = parents.shape[1] + j
        shifted = ext[:, j].astype(np.uint64) << np.uint64(8 * (position % 4))
        added += table[:, 1 + position // 4][:, None] * shifted[None, :]
    total = np.zeros((parents.shape[0], ext.shape[0]), dtype=np.int64)
    per = max(1, _CHUNK // max(1, parents.shape[0] * ext.shape[0]))
    g = np.uint64(sketch.g)
    for start in range(0, sketch.seeds, per):
        stop = min(sketch.seeds, start + per)
        base = table[start:stop, :1].copy()  # (S, 1)
        base = np.repeat(base, parents.shape[0], axis=1)  # (S, P)
        for i in range(words):
            base += table[start:stop, 1 + i][:, None] * parent_words[:, i][None, :]
        h = base[:, :, None] + added[start:stop, None, :]  # (S, P, X), wraps mod 2**64
        index = ((h >> np.uint64(32)) * g) >> np.uint64(32)
        rows = cells[level][start:stop]  # (S, g)
        total += np.take_along_axis(rows, index.reshape(stop - start, -1).astype(np.intp),
                                    axis=1).sum(axis=0).reshape(total.shape)
    return total


def estimate(sketch: OpenDomainSketch, counts: IntArray, n_level: int
             ) -> tuple[FloatArray, FloatArray]:
    """(share, standard error) of prefixes from their counts C_x at a level of n_level
    reports. Standard error: the plug-in binomial one, pi clipped to [1/n, 1 - 1/n]."""
    if n_level <= 0:
        nan = np.full(counts.shape, np.nan)
        return nan, nan
    base, gain = 1.0 / sketch.g, float(sketch.p) - 1.0 / sketch.g
    rate = counts / n_level
    share = (rate - base) / gain
    pi = np.clip(rate, 1.0 / n_level, 1.0 - 1.0 / n_level)
    return share, np.sqrt(pi * (1 - pi) / n_level) / gain


def _extensions(step: int) -> NDArray[np.uint8]:
    values = np.arange(256 ** step, dtype=np.int64)
    out = np.zeros((values.size, step), dtype=np.uint8)
    for i in range(step):
        out[:, i] = (values >> (8 * (step - 1 - i))) & 0xFF
    # NUL padding is a suffix: after a NUL only NULs follow
    nul_then_byte = np.zeros(values.size, dtype=bool)
    for i in range(step - 1):
        nul_then_byte |= (out[:, i] == 0) & (out[:, i + 1:] != 0).any(axis=1)
    return out[~nul_then_byte]


def _extend_and_count(sketch: OpenDomainSketch, cells: IntArray, level: int,
                      prefixes: NDArray[np.uint8]) -> tuple[NDArray[np.uint8], IntArray]:
    """Every extension of every prefix by ``step`` bytes (a value is not empty; after the NUL
    padding only NULs follow), with its count C_x."""
    ext = _extensions(sketch.step)
    counts = extension_counts(sketch, cells, level, prefixes, ext)  # (P, X)
    if prefixes.shape[1] == 0:
        valid = np.broadcast_to(ext[:, 0] != 0, counts.shape)
    else:
        ended = prefixes[:, -1] == 0
        valid = np.where(ended[:, None], (ext == 0).all(axis=1)[None, :], True)
    parent, which = np.nonzero(valid)
    out = np.concatenate([prefixes[parent], ext[which]], axis=1)
    return out, counts[parent, which]


def discover(mechanism: OpenDomainSketch | str, counters: NDArray[np.integer], *,
             confidence: float = 0.95, keep: int = 64) -> Discovery:
    """Discover the frequent strings behind an ``od:`` metric's counters.

    Args:
        mechanism: the sketch or its id.
        counters: shape (width,): slot 0 the reports, then one count per cell (summed over
            the periods of a window for a window).
        confidence: family-wise confidence that nothing shown has share 0.
        keep: prefixes kept at each level before extending (PEM's k).

    Returns:
        A ``Discovery``; ``found`` holds only strings whose lower bound is above 0.

    Raises:
        InvalidParameterError: counters that do not fit the mechanism, or a bad confidence.
    """
    sketch = OpenDomainSketch.from_id(mechanism) if isinstance(mechanism, str) else mechanism
    if not 0 < confidence < 1:
        raise InvalidParameterError(f"confidence must lie in (0, 1). Got {confidence}.")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidParameterError(f"keep must be an int >= 1. Got {keep!r}.")
    cells = level_counters(sketch, counters)
    n_per_level = tuple(int(x) for x in cells.sum(axis=(1, 2)))
    growing = np.zeros((1, 0), dtype=np.uint8)
    done_rows: list[NDArray[np.uint8]] = []  # complete strings, padded to max_bytes
    done_counts: list[IntArray] = []  # their counts summed over the levels since creation
    done_n: list[IntArray] = []  # the reports of those levels
    for level in range(sketch.levels):
        length = sketch.prefix_length(level)
        for i, rows in enumerate(done_rows):  # complete strings: every level counts them
            done_counts[i] = done_counts[i] + prefix_counts(sketch, cells, level,
                                                            rows[:, :length])
            done_n[i] = done_n[i] + n_per_level[level]
        if growing.shape[0] == 0:
            continue
        prefixes, counts = _extend_and_count(sketch, cells, level, growing)
        ended = (prefixes[:, -1] == 0) | (level == sketch.levels - 1)
        if ended.any():  # created here from parents chosen on earlier levels only
            rows = np.zeros((int(ended.sum()), sketch.max_bytes), dtype=np.uint8)
            rows[:, :length] = prefixes[ended]
            done_rows.append(rows)
            done_counts.append(counts[ended])
            done_n.append(np.full(rows.shape[0], n_per_level[level], dtype=np.int64))
        prefixes, counts = prefixes[~ended], counts[~ended]
        share, _ = estimate(sketch, counts, n_per_level[level])
        best = np.argsort(-share, kind="stable")[:keep]
        growing = prefixes[best]
    strings = np.concatenate(done_rows) if done_rows else np.zeros((0, sketch.max_bytes),
                                                                      np.uint8)
    pooled_counts = np.concatenate(done_counts) if done_counts else np.zeros(0, np.int64)
    pooled_n = np.concatenate(done_n) if done_n else np.zeros(0, np.int64)
    gain, base = float(sketch.p) - 1.0 / sketch.g, 1.0 / sketch.g
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = pooled_counts / pooled_n
        share = (rate - base) / gain
        pi = np.clip(rate, 1.0 / np.maximum(pooled_n, 1), 1.0 - 1.0 / np.maximum(pooled_n, 1))
        stderr = np.sqrt(pi * (1 - pi) / pooled_n) / gain
    tested = int(strings.shape[0])
    alpha = (1 - confidence) / max(tested, 1)
    z = NormalDist().inv_cdf(1 - alpha)
    order = np.argsort(-share, kind="stable")
    ranked: list[Found] = []
    for i in order:
        text = decode_string(strings[i].tobytes())
        if text is None or not math.isfinite(share[i]):
            continue
        ranked.append(Found(text, float(share[i]), float(share[i] - z * stderr[i]),
                            float(share[i] + z * stderr[i])))
    found = tuple(f for f in ranked if f.lower > 0)
    n_last = n_per_level[-1]
    min_share = z * math.sqrt(base * (1 - base) / n_last) / gain if n_last else math.inf
    return Discovery(sketch.id, int(np.asarray(counters)[0]), n_per_level, found,
                     tuple(ranked), tested, confidence, z, min_share)


def track(mechanism: OpenDomainSketch | str, counters: NDArray[np.integer], value: str
          ) -> tuple[int, float, float]:
    """One given string's share as ``discover`` scores a complete string: its counts pooled
    over the levels from the one that completes it (its first prefix ending in the NUL padding,
    else the last) to the last. Cost: levels x seeds hash evaluations (no search).

    Returns:
        (reports pooled, unbiased share, standard error); the share is NaN with no reports.

    Raises:
        InvalidParameterError: counters that do not fit, or a value ``normalise`` refuses.
    """
    from deniable.client.open_domain import normalise

    sketch = OpenDomainSketch.from_id(mechanism) if isinstance(mechanism, str) else mechanism
    padded = np.frombuffer(normalise(value, sketch.max_bytes), dtype=np.uint8)
    cells = level_counters(sketch, counters)
    n_per_level = cells.sum(axis=(1, 2))
    length = int(np.count_nonzero(padded))  # the value holds no NUL (normalise)
    first = next((level for level in range(sketch.levels)
                  if sketch.prefix_length(level) > length), sketch.levels - 1)
    count = pooled = 0
    for level in range(first, sketch.levels):
        prefix = padded[None, :sketch.prefix_length(level)]
        count += int(prefix_counts(sketch, cells, level, prefix)[0])
        pooled += int(n_per_level[level])
    if not pooled:
        return 0, math.nan, math.nan
    base, gain = 1.0 / sketch.g, float(sketch.p) - 1.0 / sketch.g
    rate = count / pooled
    pi = min(max(rate, 1.0 / pooled), 1.0 - 1.0 / pooled)
    return pooled, (rate - base) / gain, math.sqrt(pi * (1 - pi) / pooled) / gain
