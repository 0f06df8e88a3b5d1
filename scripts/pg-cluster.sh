# Shared by the comparison scripts (source it): a throwaway PostgreSQL 15 cluster owned by
# an unprivileged user, listening on loopback, with a `bench` database.
#   start_pg DIR PORT   # extra postgresql.conf lines on stdin
#   stop_pg DIR
PGBIN=/usr/lib/postgresql/15/bin

start_pg() {
  local dir=$1 port=$2
  id pgrun >/dev/null 2>&1 || useradd -m pgrun
  rm -rf "$dir"; mkdir -p "$dir"; chown pgrun "$dir"
  su pgrun -c "$PGBIN/initdb -D $dir/data -U bench >/dev/null 2>&1"
  {
    echo "port = $port"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "shared_buffers = 128MB"
    echo "fsync = on"
    echo "synchronous_commit = on"
    cat
  } >> "$dir/data/postgresql.conf"
  su pgrun -c "$PGBIN/pg_ctl -D $dir/data -l $dir/log -w start" >/dev/null
  su pgrun -c "$PGBIN/createdb -h 127.0.0.1 -p $port -U bench bench"
}

stop_pg() {
  su pgrun -c "$PGBIN/pg_ctl -D $1/data -w stop" >/dev/null 2>&1
}
