"""``deniable keys``: create, list and revoke the collector's API keys (straight in Redis)."""
from __future__ import annotations

import argparse
import sys

from deniable.cli.options import env_default

HELP = "manage API keys: create (prints the secret once), list, revoke"
ROLES = ("ingest", "read", "admin")
DESCRIPTION = """\
Manage the collector's API keys, straight in its Redis. Each key has one role:
  ingest  apps send reports (one key per app: --app is required)
  read    analysts read counts and metric lists
  admin   registers and retires metrics
Redis stores only a SHA-256 of each key. `create` prints the key once, on stdout (details go
to stderr), so `KEY=$(deniable keys create --role ingest --app shop)` captures just the key.
A revoked key is refused by every collector within DENIABLE_AUTH_CACHE_SECONDS (default 5 s)."""


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("keys", help=HELP, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default=env_default("REDIS_URL", "redis://127.0.0.1:6379/0"),
                        help="the collector's Redis, or any node of its Redis Cluster "
                             "(DENIABLE_REDIS_URL; default %(default)s)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a key and print it once",
                                description="Create a key and print it once on stdout.")
    create.add_argument("--role", required=True, choices=ROLES, help="what the key may do")
    create.add_argument("--app", default="",
                        help="the app the key is for (required for ingest keys; a label "
                             "for the others): letters, digits, '.', '_', '-'")
    create.set_defaults(run=run_create)
    listing = actions.add_parser("list", help="list keys (never secrets or hashes)",
                                 description="List every key: id, role, app, created, revoked.")
    listing.set_defaults(run=run_list)
    revoke = actions.add_parser("revoke", help="revoke a key by its id",
                                description="Revoke a key by its id (see `deniable keys list`).")
    revoke.add_argument("key_id", help="the key's id (16 hex characters)")
    revoke.set_defaults(run=run_revoke)


def _client(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from deniable.collector.store import connect

    return connect(args.redis_url, cluster=None)  # a Redis Cluster too


def _call(args: argparse.Namespace, action):  # type: ignore[no-untyped-def]
    """Run ``action(client)``, turning Redis and key errors into a CLI error message."""
    import redis

    from deniable.collector.auth import AuthError
    from deniable.collector.errors import CollectorError
    from deniable.collector.observability import configure_logging

    configure_logging()  # creating or revoking a key writes one JSON audit line to stderr
    try:
        client = _client(args)  # asks the server whether it is a cluster node
    except redis.RedisError as exc:
        raise CollectorError(f"cannot use Redis at {args.redis_url}: {exc}") from exc
    try:
        return action(client)
    except AuthError:
        raise
    except redis.RedisError as exc:
        raise CollectorError(f"cannot use Redis at {args.redis_url}: {exc}") from exc
    finally:
        client.close()


def run_create(args: argparse.Namespace) -> int:
    from deniable.collector.auth import create_key

    new = _call(args, lambda c: create_key(c, args.role, args.app))
    info = new.info
    print(f"created {info.role} key {info.key_id}" + (f" for app {info.app}" if info.app else "")
          + ". This is the only time the key is shown: store it now.", file=sys.stderr)
    print(new.secret)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from deniable.collector.auth import list_keys

    found = _call(args, list_keys)
    print(f"{'KEY ID':<16}  {'ROLE':<6}  {'APP':<20}  {'CREATED':<25}  REVOKED")
    for k in found:
        print(f"{k.key_id:<16}  {k.role:<6}  {k.app or '-':<20}  {k.created.isoformat():<25}  "
              f"{k.revoked.isoformat() if k.revoked else '-'}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from deniable.collector.auth import revoke_key

    info = _call(args, lambda c: revoke_key(c, args.key_id))
    print(f"revoked {info.role} key {info.key_id}" + (f" ({info.app})" if info.app else "")
          + f" at {info.revoked.isoformat() if info.revoked else '?'}")
    return 0
