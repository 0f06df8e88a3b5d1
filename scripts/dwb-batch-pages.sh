#!/bin/bash
# dwb_batch_pages by measurement: walrus dwb, pgbench tpcb-like scale 10, 16 clients,
# checkpoint_timeout 30s, max_wal_size 64MB (the dwb scenario's settings), 20 s per run,
# sizes alternating over rounds; one data directory per size, loaded once.
W=${W:-target/release/walrus}
BASE=/tmp/dwbb; rm -rf $BASE; mkdir -p $BASE
port=55460
for n in 16 32 64 128 256; do
  d=$BASE/d$n; $W init $d >/dev/null 2>&1
  sed -i "s/^page_protection.*/page_protection = \"dwb\"/; s/^dwb_batch_pages.*/dwb_batch_pages = $n/; s/^max_wal_size.*/max_wal_size = \"64MB\"/; s/^checkpoint_timeout.*/checkpoint_timeout = \"30s\"/" $d/walrus.toml
  $W serve --data $d --port $port > $d.log 2>&1 & sleep 2
  pgbench -h 127.0.0.1 -p $port -U postgres -i -s 10 postgres >/dev/null 2>&1
  $W stop $d >/dev/null 2>&1; sleep 1
done
for round in 1 2 3; do
  order="16 32 64 128 256"; [ $((round % 2)) -eq 0 ] && order="256 128 64 32 16"
  for n in $order; do
    d=$BASE/d$n
    $W serve --data $d --port $port >> $d.log 2>&1 & sleep 2
    tps=$(pgbench -h 127.0.0.1 -p $port -U postgres -M prepared -c 16 -j 2 -T 20 postgres 2>/dev/null | awk '/^tps/ {print $3}')
    stats=$(psql -h 127.0.0.1 -p $port -U postgres -At -c "select batches, pages, round(avg_batch_pages::numeric,1), slot_waits from walrus_stat_dwb" postgres)
    $W stop $d >/dev/null 2>&1; sleep 1
    echo "round $round batch $n tps $tps dwb(batches|pages|avg|slot_waits) $stats load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
