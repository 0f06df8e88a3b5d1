#!/bin/bash
# Side-by-side pgbench: PostgreSQL 15 vs walrus, same machine, same client, one run.
# Usage (as root, from the repository root, after cargo build --release -p walrus):
#   bash scripts/pgbench-side-by-side.sh
# Starts PostgreSQL 15 (as an unprivileged user it creates) on 55440 and walrus on 55441,
# initialises both with pgbench -i -s 10, runs the same pgbench against each, prints WAL
# bytes, full-page images, TPS, average and p99 latency, and leaves results in /tmp/run_pg.log and
# /tmp/run_walrus.log. `walrus-bench compare` (issue 4) is the general harness; this
# script is exactly issue 3's side-by-side command.
set -u
. "$(dirname "$0")/pg-cluster.sh"
rm -rf /tmp/walside
start_pg /tmp/pgside 55440 <<CONF
max_wal_size = 1GB
checkpoint_timeout = 5min
full_page_writes = on
CONF
${WALRUS:-target/release/walrus} serve --data /tmp/walside --port 55441 > /tmp/walside.log 2>&1 &
WPID=$!
sleep 2
for p in 55440 55441; do pgbench -h 127.0.0.1 -p $p -U bench -i -s 10 -q bench > /tmp/init_$p.log 2>&1; done
lsn() { psql -h 127.0.0.1 -p 55440 -U bench -At -c "select pg_current_wal_lsn()" bench; }
fpi() { psql -h 127.0.0.1 -p $1 -U bench -At -c "select wal_fpi from pg_stat_wal" bench; }
L1=$(lsn); F1=$(fpi 55440)
rm -rf /tmp/pgside_logs; mkdir -p /tmp/pgside_logs
pgbench -h 127.0.0.1 -p 55440 -U bench -M prepared -c 16 -j 2 -T 60 -l --log-prefix=/tmp/pgside_logs/pg bench > /tmp/run_pg.log 2>&1
L2=$(lsn); F2=$(fpi 55440)
wlsn() { psql -h 127.0.0.1 -p 55441 -U bench -At -c "select pg_current_wal_lsn()" bench; }
W1=$(wlsn); G1=$(fpi 55441)
pgbench -h 127.0.0.1 -p 55441 -U bench -M prepared -c 16 -j 2 -T 60 -l --log-prefix=/tmp/pgside_logs/walrus bench > /tmp/run_walrus.log 2>&1
W2=$(wlsn); G2=$(fpi 55441)
echo "walrus WAL bytes: $(psql -h 127.0.0.1 -p 55441 -U bench -At -c "select pg_wal_lsn_diff('$W2','$W1')" bench)"
echo "PG WAL bytes: $(psql -h 127.0.0.1 -p 55440 -U bench -At -c "select pg_wal_lsn_diff('$L2','$L1')" bench)"
echo "full-page images (pg_stat_wal.wal_fpi): walrus $((G2 - G1)), PG $((F2 - F1))"
# p99 latency from pgbench's per-transaction logs (column 3: latency in microseconds).
p99() { cat /tmp/pgside_logs/$1.* | awk '{print $3}' | sort -n | awk '{a[NR]=$1} END {printf "%.2f ms", a[int(NR*0.99)]/1000}'; }
for sys in pg walrus; do
  log=/tmp/run_$sys.log; [ $sys = pg ] && name=PostgreSQL || name=walrus
  echo "$name: $(grep -E '^tps' $log | head -1) | $(grep 'latency average' $log) | p99 $(p99 $sys)"
done
kill -TERM $WPID; wait $WPID
stop_pg /tmp/pgside
echo done
