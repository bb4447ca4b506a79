#!/bin/sh
# Load one master's backup (deploy/redis-backup.sh) into a Redis Cluster, each key into its
# slot's master, with its value and expiry (docs/operations.md, "Backup and restore"):
#
#   deploy/redis-cluster/import-backup.sh BACKUP.rdb CLUSTER_HOST:PORT [SPARE_PORT]
#
# Run it once per master's backup, against a new, empty cluster (create-cluster.sh). It loads
# the file into a plain Redis of its own (AOF off, no cluster, loopback on SPARE_PORT, 7999 by
# default), copies every key with `redis-cli --cluster import --cluster-copy --cluster-replace`
# (MIGRATE), and stops that Redis. The cluster's nodes write what they receive to their AOFs.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 BACKUP.rdb CLUSTER_HOST:PORT [SPARE_PORT]" >&2
  exit 2
fi
backup=$1
target=$2
spare=${3:-7999}
dir=$(mktemp -d)
cleanup() {
  if [ -f "$dir/redis.pid" ]; then
    pid=$(cat "$dir/redis.pid")
    redis-cli -p "$spare" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
cp "$backup" "$dir/dump.rdb"
redis-server --port "$spare" --bind 127.0.0.1 --dir "$dir" --appendonly no --save "" \
  --cluster-enabled no --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
tries=0
until [ "$(redis-cli -p "$spare" PING 2>/dev/null)" = PONG ]; do  # LOADING until loaded
  tries=$((tries + 1))
  if [ "$tries" -gt 6000 ]; then echo "import: Redis did not load $backup" >&2; exit 1; fi
  sleep 0.1
done
keys=$(redis-cli -p "$spare" DBSIZE)
if ! redis-cli --cluster import "$target" --cluster-from "127.0.0.1:$spare" \
    --cluster-copy --cluster-replace >"$dir/import.log" 2>&1; then
  cat "$dir/import.log" >&2
  exit 1
fi
echo "import: $keys keys from $backup into the cluster at $target"
