#!/bin/sh
# Restore a backup (redis-backup.sh) into a new data directory for deploy/redis.conf
# (docs/operations.md, "Backup and restore").
#
#   deploy/redis-restore.sh BACKUP.rdb NEW_DIR [REDIS_CONF]   (default: redis.conf beside this)
#
# With `appendonly yes`, Redis loads only the AOF (appendonlydir/) and ignores a dump.rdb
# beside it: copying the RDB into a data directory gives an EMPTY Redis. So this loads the RDB
# with AOF off, in a Redis of its own that listens on a Unix socket only (no collector can
# write meanwhile), switches AOF on (Redis then rewrites the whole dataset into
# appendonlydir/), waits for the rewrite, and shuts that Redis down. Then start Redis on
# NEW_DIR as usual (Debian: chown -R redis:redis NEW_DIR, point `dir` at it).
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 BACKUP.rdb NEW_DIR [REDIS_CONF]" >&2
  exit 2
fi
backup=$1
dir=$2
conf=${3:-$(dirname "$0")/redis.conf}
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  echo "restore: $dir is not empty: restore into a new directory" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cp "$backup" "$dir/dump.rdb"
socket="$dir/restore.sock"
redis-server "$conf" --dir "$dir" --appendonly no --save "" --port 0 \
  --unixsocket "$socket" --unixsocketperm 700 --daemonize yes \
  --pidfile "$dir/restore.pid" --logfile "$dir/restore.log"
cli() { redis-cli -s "$socket" "$@"; }
field() { cli INFO persistence | tr -d '\r' | sed -n "s/^$1://p"; }
tries=0
until [ "$(cli PING 2>/dev/null)" = PONG ]; do  # LOADING until the RDB is in memory
  tries=$((tries + 1))
  if [ "$tries" -gt 6000 ]; then echo "restore: Redis did not load $backup" >&2; exit 1; fi
  sleep 0.1
done
keys=$(cli DBSIZE)
cli CONFIG SET appendonly yes >/dev/null
sleep 0.1
until [ "$(field aof_rewrite_in_progress)" = 0 ] && [ "$(field aof_rewrite_scheduled)" = 0 ]; do
  sleep 0.1
done
if [ "$(field aof_enabled)" != 1 ] || [ "$(field aof_last_bgrewrite_status)" != ok ]; then
  echo "restore: the AOF rewrite failed: see $dir/restore.log" >&2
  exit 1
fi
pid=$(cat "$dir/restore.pid")
cli SHUTDOWN >/dev/null 2>&1 || true
while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
rm -f "$dir/dump.rdb" "$dir/restore.log"
echo "restore: $keys keys into $dir/appendonlydir"
