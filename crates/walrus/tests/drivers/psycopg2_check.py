"""psycopg2 (Debian's python3-psycopg2) against a server: the program a new user would try.

Run by tests/drivers.rs with the server's port and database as argv[1], argv[2], first
against PostgreSQL 15 (which proves the program), then against walrus. Prints OK on
success and exits non-zero (with the failing assertion) otherwise.

psycopg2 interpolates parameters into the SQL text on the client (the simple query
protocol), so this checks literals of every type, and reads results by the type OIDs and
modifiers of RowDescription (cursor.description's precision and scale come from them).
"""
import datetime
import sys
import uuid
from decimal import Decimal

import psycopg2
import psycopg2.errors
import psycopg2.extras

psycopg2.extras.register_uuid()
port, db = int(sys.argv[1]), sys.argv[2]
IST = datetime.timezone(datetime.timedelta(hours=5, minutes=30))


def row(i):
    return (
        i,
        "név-%d" % i if i % 3 == 0 else "name %d" % i,
        Decimal("1234.50" if i % 2 == 0 else "-0.07") + i,
        datetime.datetime(2024, 1, 1, 10, 11, 12, 123457, tzinfo=IST) + datetime.timedelta(minutes=i),
        i % 2 == 0,
        bytes((i * 37 + k * 101) % 256 for k in range(i % 5)),
        uuid.UUID(int=(0xA0EEBC999C0B4EF8 + i) << 64 | i),
    )


def same(want, got, what):
    assert want == got, "%s: want %r got %r" % (what, want, got)


def check_row(got, i):
    want = row(i)
    same(want[0], got[0], "id")
    same(want[1], got[1], "name of %d" % i)
    same(want[2], got[2], "amount of %d" % i)
    same(2, -got[2].as_tuple().exponent, "amount scale of %d" % i)
    same(want[3], got[3], "at of %d" % i)
    same(want[4], got[4], "ok of %d" % i)
    same(want[5], bytes(got[5]), "data of %d" % i)
    same(want[6], got[6], "uid of %d" % i)


conn = psycopg2.connect(host="127.0.0.1", port=port, user="bench", dbname=db)
cur = conn.cursor()
cur.execute("drop table if exists pg2_check")
cur.execute(
    "create table pg2_check (id int primary key, name varchar(20), amount numeric(10,2), "
    "at timestamptz, ok boolean, data bytea, uid uuid)"
)
conn.commit()
insert = "insert into pg2_check (id, name, amount, at, ok, data, uid) values (%s, %s, %s, %s, %s, %s, %s)"
for i in range(1, 6):
    cur.execute(insert, row(i))
cur.executemany(insert, [row(i) for i in range(6, 21)])
cur.execute(insert, (100, None, None, None, None, None, None))
conn.commit()

# Select by id ten times, then all rows.
for k in range(10):
    i = 1 + 2 * k
    cur.execute("select id, name, amount, at, ok, data, uid from pg2_check where id = %s", (i,))
    got = cur.fetchall()
    same(1, len(got), "rows for %d" % i)
    check_row(got[0], i)
cur.execute("select id, name, amount, at, ok, data, uid from pg2_check where id = 100")
same((100, None, None, None, None, None, None), cur.fetchone(), "null row")
cur.execute("select id, name, amount, at, ok, data, uid from pg2_check where id < 100 order by id")
rows = cur.fetchall()
same(20, len(rows), "row count")
for i, r in enumerate(rows, start=1):
    check_row(r, i)

# cursor.description: type OIDs, sizes, precision and scale from RowDescription.
d = cur.description
same(["id", "name", "amount", "at", "ok", "data", "uid"], [c.name for c in d], "names")
same([23, 1043, 1700, 1184, 16, 17, 2950], [c.type_code for c in d], "type OIDs")
same(20, d[1].internal_size, "varchar(20) size")
same((10, 2), (d[2].precision, d[2].scale), "numeric(10,2) precision and scale")
same(4, d[0].internal_size, "int4 size")

# Rollback undoes.
cur.execute("update pg2_check set amount = amount + %s where id = %s", (Decimal("1.01"), 2))
conn.rollback()
cur.execute("select amount from pg2_check where id = 2")
same(row(2)[2], cur.fetchone()[0], "rolled back amount")
conn.commit()

# A duplicate key inside a transaction, then 25P02 until rollback.
cur.execute(insert, row(21))
try:
    cur.execute(insert, row(1))
    raise AssertionError("duplicate key accepted")
except psycopg2.errors.UniqueViolation as e:
    same("23505", e.pgcode, "duplicate key state")
try:
    cur.execute("select 1")
    raise AssertionError("statement ran in an aborted transaction")
except psycopg2.errors.InFailedSqlTransaction as e:
    same("25P02", e.pgcode, "aborted state")
conn.rollback()
cur.execute("select count(*) from pg2_check")
same(21, cur.fetchone()[0], "rows after rollback")

# Literals the server must convert exactly.
cur.execute("select '2024-01-01 10:11:12.123457+05:30'::timestamptz, 1234.5::numeric(10,2), "
            "'2023-12-31 20:41:12.123457-08'::timestamptz")
t1, n, t2 = cur.fetchone()
same(datetime.datetime(2024, 1, 1, 4, 41, 12, 123457, tzinfo=datetime.timezone.utc), t1, "offset literal")
same("1234.50", str(n), "numeric cast keeps the scale")
same(t1, t2, "negative short offset")

# COPY from the client.
cur.copy_expert("copy pg2_check (id, name, amount, at) from stdin",
                __import__("io").StringIO("300\tcopied\t7.5\t2024-01-01 10:00:00+05:30\n"))
cur.execute("select name, amount, at from pg2_check where id = 300")
same(("copied", Decimal("7.50"),
      datetime.datetime(2024, 1, 1, 4, 30, tzinfo=datetime.timezone.utc)), cur.fetchone(), "copied row")
conn.rollback()

# The session TimeZone: timestamptz values read in it, with its offset (half hours too).
cur.execute("set timezone = 'Europe/Berlin'")
cur.execute("select '2024-01-01 10:00+00'::timestamptz, '2024-07-01 10:00'::timestamptz")
winter, summer = cur.fetchone()
same(datetime.timedelta(hours=1), winter.utcoffset(), "Berlin winter offset")
same(datetime.datetime(2024, 1, 1, 10, tzinfo=datetime.timezone.utc), winter, "Berlin instant")
same(datetime.datetime(2024, 7, 1, 8, tzinfo=datetime.timezone.utc), summer, "local input")
# COPY reads a timestamptz without an offset in the zone and writes it in the zone.
cur.copy_expert("copy pg2_check (id, at) from stdin",
                __import__("io").StringIO("301\t2024-07-01 10:00\n"))
cur.execute("select at from pg2_check where id = 301")
same(datetime.datetime(2024, 7, 1, 8, tzinfo=datetime.timezone.utc), cur.fetchone()[0], "COPY in Berlin")
copied_out = __import__("io").StringIO()
cur.copy_expert("copy (select at from pg2_check where id = 301) to stdout", copied_out)
same("2024-07-01 10:00:00+02\n", copied_out.getvalue(), "COPY TO in Berlin")
conn.rollback()
cur.execute("set timezone = 'Asia/Kolkata'")
cur.execute("select '2024-01-01 10:00+00'::timestamptz")
same(datetime.timedelta(hours=5, minutes=30), cur.fetchone()[0].utcoffset(), "Kolkata offset")
cur.execute("set timezone = 'UTC'")
conn.commit()

# timetz round trip (psycopg2 sends an aware time as '...'::timetz and reads the text
# form back into one); reg* values read as names; AT TIME ZONE.
cur.execute("create table pg2_tz (id int primary key, t timetz)")
t_in = datetime.time(10, 11, 12, 123000, tzinfo=IST)
cur.execute("insert into pg2_tz values (%s, %s)", (1, t_in))
cur.execute("select t, t::text, t::time from pg2_tz where id = 1")
t_out, t_text, t_plain = cur.fetchone()
same(t_in, t_out, "timetz round trip")
same(datetime.timedelta(hours=5, minutes=30), t_out.utcoffset(), "timetz offset")
same("10:11:12.123+05:30", t_text, "timetz text")
same(datetime.time(10, 11, 12, 123000), t_plain, "timetz to time")
cur.execute("select 'pg2_tz'::regclass, 'int4'::regtype, "
            "'pg2_tz'::regclass = (select oid from pg_class where relname = 'pg2_tz')")
same(("pg2_tz", "integer", True), cur.fetchone(), "reg* values")
cur.execute("select %s at time zone 'America/New_York', "
            "%s at time zone 'Europe/Berlin'",
            (datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc),
             datetime.datetime(2024, 7, 1, 12)))
same((datetime.datetime(2024, 1, 1, 7),
      datetime.datetime(2024, 7, 1, 10, tzinfo=datetime.timezone.utc)),
     cur.fetchone(), "at time zone")
cur.execute("drop table pg2_tz")
conn.commit()

# Cancel: a long statement cancelled from another thread fails with 57014, and the
# connection works after it.
timer = __import__("threading").Timer(0.5, conn.cancel)
timer.start()
try:
    cur.execute("select pg_sleep(10)")
    raise AssertionError("pg_sleep was not cancelled")
except psycopg2.errors.QueryCanceled as e:
    same("57014", e.pgcode, "cancelled state")
finally:
    timer.cancel()
    # conn.cancel returns once the server has closed the cancel connection, that is
    # after PostgreSQL has sent both of its signals (to the process and to its process
    # group): joining keeps a late second signal off the next statement.
    timer.join()
conn.rollback()
cur.execute("select 1")
same(1, cur.fetchone()[0], "statement after cancel")

cur.execute("drop table pg2_check")
conn.commit()
conn.close()
print("OK")
