#!/bin/sh
# Back up the collector's Redis to one RDB file, whether AOF is on or off
# (docs/operations.md, "Backup and restore"). Run it from any host that reaches Redis:
# `redis-cli --rdb` asks Redis for a snapshot over the replication protocol, as a replica
# would, so nothing is read from Redis's disk and Redis goes on serving. The file is checked
# with redis-check-rdb and only then moved to its name.
#
#   deploy/redis-backup.sh BACKUP.rdb [redis-cli options: -h HOST -p PORT --user U --pass P]
#
# On a Redis Cluster, run it once per master (each holds the keys of its slots).
# It takes about 5 s more than the transfer: Redis waits repl-diskless-sync-delay (5 s) for
# other replicas to share the snapshot.
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 BACKUP.rdb [redis-cli options]" >&2
  exit 2
fi
out=$1
shift
partial="$out.partial"
rm -f "$partial"
if ! redis-cli "$@" --rdb "$partial" >/dev/null; then
  rm -f "$partial"
  echo "backup: redis-cli --rdb failed" >&2
  exit 1
fi
if ! redis-check-rdb "$partial" >/dev/null 2>&1; then
  echo "backup: $partial is not a sound RDB file (redis-check-rdb)" >&2
  exit 1
fi
mv "$partial" "$out"
echo "backup: $out ($(wc -c < "$out") bytes)"
