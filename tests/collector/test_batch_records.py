"""What batch records give whoever holds DENIABLE_BATCH_SECRET (issue 26, item 6).

A batch id's record is HMAC-SHA256(secret, the batch's content digest) when a secret is set,
so that an id reused for other content can be refused (409). The content of a small batch
comes from a small space the public catalogue spells out, so whoever holds both a Redis dump
and the secret matches every record to its content: the batch's joint answers. Without the
secret the record is ``1`` for every batch and holds nothing to match. docs/privacy.md
("What the server holds") states it; this test is the attack, against a real Redis.
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import random
from datetime import datetime, timezone

import redis

from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.store import Store

METRICS = {"a": "rr:1/2:1/2", "b": "rr:1/2:1/2", "c": "rr:1/2:1/2", "d": "rr:1/2:1/2"}
# Every batch a device sends of these four boolean metrics, one report each: 16 contents.
CANDIDATES = [list(zip(METRICS, METRICS.values(), bits))
              for bits in itertools.product((0, 1), repeat=len(METRICS))]


def _store_batches(store: Store, sent: int, seed: int) -> dict[str, int]:
    """Add ``sent`` batches of random candidate contents; batch id -> candidate index."""
    rng, now, truth = random.Random(seed), datetime.now(timezone.utc), {}
    for _ in range(sent):
        index = rng.randrange(len(CANDIDATES))
        batch = decode_batch(encode_batch(new_batch_id(), CANDIDATES[index]), METRICS)
        store.add_batch(batch, now, {m: 90 for m in METRICS}, 3600)
        truth[batch.batch_id] = index
    return truth


def _match(client: redis.Redis, secret: bytes) -> dict[str, set[int]]:
    """The operator's attack: each record against the keyed digest of every candidate."""
    keyed = {}
    for index, reports in enumerate(CANDIDATES):
        digest = decode_batch(encode_batch(new_batch_id(), reports), METRICS).digest
        keyed.setdefault(hmac.new(secret, digest.encode(), hashlib.sha256).hexdigest()[:32],
                         set()).add(index)
    found = {}
    for key in client.scan_iter(match=keys.batch("*")):
        batch_id = key.decode().rsplit(":", 1)[1]
        found[batch_id] = keyed.get(client.get(key).decode(), set())
    return found


def test_with_the_secret_every_record_gives_its_batch_content(redis_client: redis.Redis) -> None:
    secret = b"the deployment's batch secret"
    truth = _store_batches(Store(redis_client, secret), 30, seed=6)
    found = _match(redis_client, secret)
    assert found.keys() == truth.keys()
    assert all(found[batch_id] == {index} for batch_id, index in truth.items())  # 30 of 30


def test_without_the_secret_records_hold_nothing_to_match(redis_client: redis.Redis) -> None:
    truth = _store_batches(Store(redis_client), 30, seed=6)
    records = {redis_client.get(keys.batch(batch_id)) for batch_id in truth}
    assert records == {b"1"}  # the same for every content: nothing to match
    # Even a guessed secret matches nothing: no record depends on the content.
    assert all(not found for found in _match(redis_client, b"a guess").values())
