#!/bin/bash
# Group commit through the server, PostgreSQL 15 vs walrus: one-row INSERT transactions
# (fsync and synchronous_commit on for both) from 1 and from 16 pgbench clients; the
# 16/1 ratio is each system's group-commit scaling on this machine.
# Usage (as root, from the repository root, after cargo build --release -p walrus):
#   bash scripts/commit-scaling.sh [seconds per run, default 8] [repetitions, default 2]
set -u
SECS=${1:-8}
REPS=${2:-2}
WALRUS=${WALRUS:-target/release/walrus}
. "$(dirname "$0")/pg-cluster.sh"
rm -rf /tmp/gcw
start_pg /tmp/gcpg 55443 </dev/null
$WALRUS serve --data /tmp/gcw --port 55444 > /tmp/gcw.log 2>&1 &
WPID=$!
trap 'kill -TERM $WPID 2>/dev/null; stop_pg /tmp/gcpg' EXIT
for i in $(seq 1 50); do psql -h 127.0.0.1 -p 55444 -U bench -Atc "select 1" bench >/dev/null 2>&1 && break; sleep 0.2; done
printf '\\set id random(1, 1000000000)\ninsert into gc (id, v) values (:id, repeat($$x$$, 20));\n' > /tmp/gc.sql
for port in 55443 55444; do
  psql -h 127.0.0.1 -p $port -U bench -q -c "create table gc (id bigint, v text)" bench
done
echo "| repetition | system | 1 client TPS | 16 clients TPS | 16 / 1 |"
echo "|---|---|---|---|---|"
for rep in $(seq 1 "$REPS"); do
  for port in 55443 55444; do
    [ $port = 55443 ] && name=PostgreSQL || name=walrus
    one=$(pgbench -h 127.0.0.1 -p $port -U bench -n -M prepared -f /tmp/gc.sql -c 1 -j 1 -T "$SECS" bench 2>&1 | grep -oP 'tps = \K[0-9.]+')
    many=$(pgbench -h 127.0.0.1 -p $port -U bench -n -M prepared -f /tmp/gc.sql -c 16 -j 2 -T "$SECS" bench 2>&1 | grep -oP 'tps = \K[0-9.]+')
    echo "| $rep | $name | ${one%.*} | ${many%.*} | $(python3 -c "print(f'{$many/$one:.2f}x')") |"
  done
done
