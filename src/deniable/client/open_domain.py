"""The open-domain mechanism: prefix extension over a fixed family of local hashes (``od:``).

A string metric names no list: the device holds one string (a crash signature, a domain, a
search term) and the server discovers the frequent ones from counters alone.

The mechanism (PEM-style prefix extension, Wang et al. 2021, with optimized local hashing,
Wang et al. 2017, over a FIXED finite family of hash seeds):

1. The value is normalised (``normalise``): Unicode NFC, UTF-8, at most ``max_bytes`` bytes
   (longer: refused, or cut at a character boundary if the metric declares ``clamp``), no NUL,
   not empty; then padded with NUL bytes to ``max_bytes``.
2. The padded bytes are cut into ``levels = max_bytes / step`` prefixes, of ``step``,
   ``2 step``, ..., ``max_bytes`` bytes. The device draws a level ``l`` in [0, levels) and a
   seed ``s`` in [0, seeds) uniformly (``below``: exact, secure), neither of which depends on
   the value.
3. It hashes its prefix of level ``l`` with hash ``h_{l,s}`` to a bucket in [0, g), and reports
   that bucket through k-ary randomized response over g (``KaryRandomizedResponse``: the true
   bucket with probability p, each other with probability q = (1 - p) / (g - 1)).

The report is one integer, ``cell = (l * seeds + s) * g + y``: the counter it adds 1 to.
Privacy: level and seed are independent of the value; given them, the bucket is GRR over g,
so any two values give any report with probabilities in ratio at most p / q. epsilon =
ln(p (g - 1) / (1 - p)), exactly the GRR's (``epsilon``), whatever the family.

The hash (reproducible in any language with 64-bit integers): for level l (0-based) and seed
s, constants a_0, a_1, ... are the little-endian 64-bit words of
SHA-256(b"deniable/od/v1" || byte(l) || uint32_le(s) || byte(j)) for j = 0, 1, ... (four per
digest). The prefix, zero-padded to a multiple of 4 bytes, is read as little-endian 32-bit
words w_1..w_m; h = (a_0 + sum a_i w_i) mod 2**64 (vector multiply-add-shift: strongly
universal over random a), and the bucket is ((h >> 32) * g) >> 32.
"""
from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from deniable.client.categorical import KaryRandomizedResponse
from deniable.client.errors import InvalidParameterError
from deniable.client.mechanism import below, fraction_field, fraction_text
from deniable.client.randomness import RandomBits

ID_PREFIX = "od"
MAX_BYTES_LIMIT = 64
"""The longest string (in UTF-8 bytes, after NFC) a metric may declare."""
DEFAULT_MAX_BYTES = 16
DEFAULT_SEEDS = 1024
"""Hash seeds in the family: the bias of a fixed family (collisions of two given strings over
the family differ from 1/g by about sqrt(1 / (g seeds))) stays well under the noise."""
MAX_SEEDS = 1 << 16
MAX_G = 1024
HASH_DOMAIN = b"deniable/od/v1"
_GRR_TAG = "00000000"  # the inner GRR has no category list: a fixed tag
_ID = re.compile(r"^od:([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,5}):([0-9]{1,4}):([0-9/]{1,41})\Z")


def normalise(value: object, max_bytes: int, clamp: bool = False) -> bytes:
    """The string as the mechanism takes it: NFC, UTF-8, NUL-padded to ``max_bytes``.

    Raises:
        InvalidParameterError: not a str, empty, holds U+0000, or longer than ``max_bytes``
            UTF-8 bytes after NFC (unless ``clamp``: then cut at the last whole character).
            The message never echoes the value: it is the secret.
    """
    if not isinstance(value, str):
        raise InvalidParameterError(
            f"the value must be a str. Got a {type(value).__name__} instead.")
    try:
        data = unicodedata.normalize("NFC", value).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        raise InvalidParameterError("the value must be valid Unicode text") from None
    if not data:
        raise InvalidParameterError("the value must be a non-empty string")
    if b"\x00" in data:
        raise InvalidParameterError("the value must not hold U+0000 (NUL pads the string)")
    if len(data) > max_bytes:
        if not clamp:
            raise InvalidParameterError(
                f"the value must be at most {max_bytes} UTF-8 bytes after NFC (the metric "
                "does not declare clamp)")
        cut = max_bytes
        while cut > 0 and (data[cut] & 0xC0) == 0x80:  # never split a character
            cut -= 1
        data = data[:cut]
        if not data:
            raise InvalidParameterError(
                f"the value's first character is longer than {max_bytes} UTF-8 bytes")
    return data + b"\x00" * (max_bytes - len(data))


def decode_string(padded: bytes) -> str | None:
    """The string a padded byte string stands for, or None if it is no normalised value
    (invalid UTF-8, a NUL before the padding, or empty)."""
    data = padded.rstrip(b"\x00")
    if not data or b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if unicodedata.is_normalized("NFC", text) else None


@functools.lru_cache(maxsize=1 << 16)
def hash_constants(level: int, seed: int, count: int) -> tuple[int, ...]:
    """``count`` 64-bit constants a_0, a_1, ... of hash h_{level,seed} (see the module doc)."""
    out: list[int] = []
    j = 0
    while len(out) < count:
        digest = hashlib.sha256(HASH_DOMAIN + bytes([level]) + seed.to_bytes(4, "little")
                                + bytes([j])).digest()
        out.extend(int.from_bytes(digest[i:i + 8], "little") for i in range(0, 32, 8))
        j += 1
    return tuple(out[:count])


def prefix_words(prefix: bytes) -> list[int]:
    """The prefix, zero-padded to a multiple of 4 bytes, as little-endian 32-bit words."""
    padded = prefix + b"\x00" * (-len(prefix) % 4)
    return [int.from_bytes(padded[i:i + 4], "little") for i in range(0, len(padded), 4)]


def bucket(prefix: bytes, level: int, seed: int, g: int) -> int:
    """h_{level,seed}(prefix) in [0, g): multiply-add-shift, then multiply-shift to [0, g)."""
    words = prefix_words(prefix)
    a = hash_constants(level, seed, len(words) + 1)
    h = a[0]
    for coefficient, word in zip(a[1:], words):
        h += coefficient * word
    return (((h & 0xFFFFFFFFFFFFFFFF) >> 32) * g) >> 32


def choose_g(epsilon: float) -> int:
    """OLH's variance-optimal bucket count, e^epsilon + 1 rounded, in [2, MAX_G]."""
    return max(2, min(MAX_G, round(math.exp(min(epsilon, 7.0)) + 1)))


@dataclass(frozen=True)
class OpenDomainSketch:
    """Prefix extension with local hashing over a fixed seed family, ``od:<max_bytes>:<step>:
    <seeds>:<g>:<p>``, e.g. ``od:16:1:1024:10:1/2``: q = 1/18, epsilon = ln 9.

    Args:
        max_bytes: longest string in UTF-8 bytes after NFC, 1..64.
        step: bytes added per level, 1 or 2, dividing ``max_bytes``.
        seeds: hash seeds in the family, 1..65536.
        g: buckets per hash, 2..1024.
        p: probability of reporting the true bucket, exact, in (1/g, 1).
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    step: int = 1
    seeds: int = DEFAULT_SEEDS
    g: int = 10
    p: Fraction = Fraction(1, 2)

    kind = "open"

    def __post_init__(self) -> None:
        for name, value, low, high in (("max_bytes", self.max_bytes, 1, MAX_BYTES_LIMIT),
                                       ("step", self.step, 1, 2),
                                       ("seeds", self.seeds, 1, MAX_SEEDS),
                                       ("g", self.g, 2, MAX_G)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidParameterError(
                    f"{name} must be an int in [{low}, {high}]. Got {value!r} instead.")
        if self.max_bytes % self.step:
            raise InvalidParameterError(
                f"step must divide max_bytes. Got step {self.step}, max_bytes {self.max_bytes}.")
        # The inner GRR checks p (exact, in (1/g, 1)) and draws the buckets.
        object.__setattr__(self, "p", self._grr.p)

    @functools.cached_property
    def _grr(self) -> KaryRandomizedResponse:
        return KaryRandomizedResponse(self.g, self.p, _GRR_TAG)

    def __reduce__(self) -> tuple[type, tuple[int, int, int, int, Fraction]]:
        return type(self), (self.max_bytes, self.step, self.seeds, self.g, self.p)

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_id(cls, mechanism_id: str) -> OpenDomainSketch:
        """Parse ``od:<max_bytes>:<step>:<seeds>:<g>:<p>`` (canonical spelling only).

        Raises:
            InvalidParameterError: any other spelling, or parameters out of range.
        """
        match = _ID.match(mechanism_id) if isinstance(mechanism_id, str) else None
        if match is None:
            raise InvalidParameterError(
                "an open-domain mechanism id looks like 'od:<max_bytes>:<step>:<seeds>:<g>:<p>'"
                f", e.g. 'od:16:1:1024:10:9/17'. Got {str(mechanism_id)[:80]!r} instead.")
        numbers = [match.group(i) for i in range(1, 5)]
        if any(str(int(text)) != text for text in numbers):
            raise InvalidParameterError(f"numbers must have no leading zeros. Got {mechanism_id!r}.")
        max_bytes, step, seeds, g = (int(text) for text in numbers)
        sketch = cls(max_bytes, step, seeds, g, p=fraction_field("p", match.group(5)))
        if sketch.id != mechanism_id:
            raise InvalidParameterError(f"not canonical: {mechanism_id!r} (is {sketch.id!r})")
        return sketch

    @classmethod
    def from_epsilon(cls, epsilon: float, max_bytes: int = DEFAULT_MAX_BYTES,
                     step: int | None = None, seeds: int = DEFAULT_SEEDS, g: int | None = None
                     ) -> OpenDomainSketch:
        """The sketch with g = e^epsilon + 1 (unless given) and the largest p = k / 2**32
        whose exact epsilon is at most ``epsilon`` (``KaryRandomizedResponse.from_epsilon``).
        ``step`` defaults to 1 byte per level, or one level of 2 bytes when ``max_bytes`` is 2
        (the decoder then scores all 65,280 strings at once, with every device: measured
        better than two levels of half the devices, docs/discovery.md)."""
        buckets = choose_g(float(epsilon)) if g is None else g
        grr = KaryRandomizedResponse.from_epsilon(epsilon, buckets, _GRR_TAG)
        chosen = (2 if max_bytes == 2 else 1) if step is None else step
        return cls(max_bytes, chosen, seeds, buckets, grr.p)

    # -- parameters ----------------------------------------------------------------------

    @property
    def id(self) -> str:
        return (f"{ID_PREFIX}:{self.max_bytes}:{self.step}:{self.seeds}:{self.g}:"
                f"{fraction_text(self.p)}")

    @property
    def levels(self) -> int:
        """Prefix levels: ``max_bytes / step``."""
        return self.max_bytes // self.step

    @property
    def cells(self) -> int:
        """Report values (and counters after ``n``): levels x seeds x g."""
        return self.levels * self.seeds * self.g

    @property
    def width(self) -> int:
        """Counter slots: slot 0 counts reports, slot 1 + cell counts each report value."""
        return 1 + self.cells

    @property
    def q(self) -> Fraction:
        """P(report bucket y | true bucket != y): (1 - p) / (g - 1)."""
        return self._grr.q

    @property
    def likelihood_ratio(self) -> Fraction:
        """p / q: the most one report moves the odds between two strings."""
        return self._grr.likelihood_ratio

    @property
    def epsilon(self) -> float:
        """ln(p / q), in nats: the whole report's privacy loss."""
        return self._grr.epsilon

    def prefix_length(self, level: int) -> int:
        """Bytes in the prefix of ``level`` (0-based): (level + 1) * step."""
        return (level + 1) * self.step

    # -- the report ----------------------------------------------------------------------

    def perturb(self, value: str, rng: RandomBits | None = None, clamp: bool = False) -> int:
        """The report (one cell index in [0, cells)) for the true string ``value``.

        Only the perturbed cell leaves; the string, its prefix and its true bucket do not.

        Raises:
            InvalidParameterError: a value ``normalise`` refuses.
        """
        return self.perturb_padded(normalise(value, self.max_bytes, clamp), rng)

    def draw_hash(self, rng: RandomBits | None = None) -> tuple[int, int]:
        """The report's (level, seed), uniform over [0, levels) x [0, seeds) (``below``:
        exact, secure); it takes no value, so the choice cannot depend on one. The first
        draws of ``perturb_padded``; ``deniable audit`` enumerates it over every random word
        and replays ``perturb_padded`` on the same words (docs/audit.md)."""
        level = below(rng, self.levels)
        return level, below(rng, self.seeds)

    def perturb_padded(self, padded: bytes, rng: RandomBits | None = None) -> int:
        """``perturb`` of an already normalised, padded value."""
        if len(padded) != self.max_bytes:
            raise InvalidParameterError(f"a padded value has {self.max_bytes} bytes")
        level, seed = self.draw_hash(rng)
        true_bucket = bucket(padded[:self.prefix_length(level)], level, seed, self.g)
        reported = self._grr.perturb(true_bucket, rng)
        return (level * self.seeds + seed) * self.g + reported

    def cell_of(self, payload: object) -> int:
        """The payload's cell, checked: an int in [0, cells).

        Raises:
            InvalidParameterError: anything else.
        """
        if isinstance(payload, bool) or not isinstance(payload, int) or \
                not 0 <= payload < self.cells:
            raise InvalidParameterError(
                f"an open-domain report is an int in [0, {self.cells}). Got {payload!r}.")
        return payload

    def increments(self, payload: object) -> list[tuple[int, int]]:
        """The (counter index, increment) pairs the collector adds for one report:
        slot 0 (reports) and slot 1 + cell."""
        return [(0, 1), (1 + self.cell_of(payload), 1)]

    def split_cell(self, cell: int) -> tuple[int, int, int]:
        """(level, seed, reported bucket) of a cell."""
        rest, reported = divmod(self.cell_of(cell), self.g)
        level, seed = divmod(rest, self.seeds)
        return level, seed, reported

    def report_probability(self, padded: bytes, cell: int) -> Fraction:
        """P(report = cell | padded value), exact: 1/(levels seeds) times p or q."""
        level, seed, reported = self.split_cell(cell)
        true_bucket = bucket(padded[:self.prefix_length(level)], level, seed, self.g)
        hit = self.p if reported == true_bucket else self.q
        return hit / (self.levels * self.seeds)
