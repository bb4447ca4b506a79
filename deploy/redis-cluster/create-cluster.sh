#!/bin/sh
# Create a Redis Cluster from nodes started with node.conf: half become masters, the other
# half one replica each (redis-cli puts a replica on another host than its master if it can).
#   deploy/redis-cluster/create-cluster.sh 10.0.0.1:7001 10.0.0.2:7002 ... (6 host:port)
# REDISCLI_AUTH, if set, is the nodes' password. The test suite runs this script as is.
set -eu
if [ "$#" -lt 6 ] || [ $(( $# % 2 )) -ne 0 ]; then
  echo "usage: $0 host:port ... (at least 6, an even number: masters, then replicas)" >&2
  exit 2
fi
exec "${REDIS_CLI:-redis-cli}" --cluster create "$@" --cluster-replicas 1 --cluster-yes
