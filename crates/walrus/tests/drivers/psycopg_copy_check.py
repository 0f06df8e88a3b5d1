"""psycopg 3's COPY against a server: text, CSV and binary COPY FROM STDIN (rows
written by the driver, and raw data in awkward pieces), COPY TO STDOUT in the three
formats, and an error that leaves nothing loaded. Prints what it reads; the test runs
it on PostgreSQL 15 and on walrus and compares the two outputs line by line.

usage: psycopg_copy_check.py PORT DBNAME
"""

import datetime
import decimal
import sys
import uuid

import psycopg

port, db = sys.argv[1], sys.argv[2]
conn = psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname=db, autocommit=True)
cur = conn.cursor()
cur.execute("drop table if exists c")
cur.execute(
    """create table c (id int primary key, s smallint, b bigint, f float8,
    n numeric(10,2), t text, v varchar(5), ch char(3), ok boolean, d date,
    ts timestamp, tz timestamptz, by bytea, u uuid)"""
)
COLS = "id, s, b, f, n, t, v, ch, ok, d, ts, tz, by, u"
TYPES = ["int4", "int2", "int8", "float8", "numeric", "text", "text", "text",
         "bool", "date", "timestamp", "timestamptz", "bytea", "uuid"]
rows = [
    (1, 2, 3, 1.5, decimal.Decimal("12.34"), "tab\there", "abc", "x", True,
     datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5, 600000),
     datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
     b"\x00\xff\\", uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    (2, None, None, None, None, "back\\slash\nnewline", None, None, None, None, None,
     None, None, None),
    (3, -1, -(2**40), -0.25, decimal.Decimal("-0.50"), "", "", "", False,
     datetime.date(1999, 12, 31), datetime.datetime(2000, 1, 1), None, b"", None),
]

# Text format, rows written by the driver.
with cur.copy(f"copy c ({COLS}) from stdin") as cp:
    for r in rows:
        cp.write_row(r)
print("text in:", cur.rowcount)

# Binary format, rows written by the driver with the columns' types.
with cur.copy(f"copy c ({COLS}) from stdin (format binary)") as cp:
    cp.set_types(TYPES)
    for r in rows:
        cp.write_row((r[0] + 10,) + r[1:])
print("binary in:", cur.rowcount)

# CSV with a quoted field spanning lines, sent a few bytes at a time.
data = 'id,t,v\n21,"multi\nline, ""quoted""",q\n22,,""\n23,"\\.",x\n'.encode()
with cur.copy("copy c (id, t, v) from stdin (format csv, header match)") as cp:
    for i in range(0, len(data), 3):
        cp.write(data[i:i + 3])
print("csv in:", cur.rowcount)

# A bad row: the whole COPY fails, nothing of it stays.
try:
    with cur.copy("copy c (id, t) from stdin") as cp:
        cp.write(b"30\tfine\n31\tfine\nnot-a-number\tx\n")
except psycopg.Error as e:
    print("error:", e.sqlstate, e.diag.message_primary, "|", e.diag.context)
cur.execute("select count(*) from c where id >= 30")
print("after error:", cur.fetchone()[0])

# Out: text, CSV with header and FORCE_QUOTE, binary read back typed.
for sql in [
    f"copy (select {COLS} from c order by id) to stdout",
    f"copy (select {COLS} from c order by id) to stdout (format csv, header, force_quote (t, v))",
]:
    out = b""
    with cur.copy(sql) as cp:
        for chunk in cp:
            out += bytes(chunk)
    print(sql.split(" to ")[1])
    print(out.decode())
with cur.copy(f"copy (select {COLS} from c order by id) to stdout (format binary)") as cp:
    cp.set_types(TYPES)
    for r in cp.rows():
        # The zone object follows the server's TimeZone spelling: print the instant.
        # A bytea comes back as a memoryview, whose repr is its address: print the bytes.
        print("binary out:", tuple(
            v.isoformat() if isinstance(v, datetime.datetime)
            else bytes(v) if isinstance(v, memoryview) else v
            for v in r))
with cur.copy("copy c (id, t) to stdout (format binary)") as cp:
    raw = b"".join(bytes(x) for x in cp)
print("binary header:", raw[:19].hex(), "trailer:", raw[-2:].hex(), "bytes:", len(raw))
cur.execute("select count(*) from c")
print("rows:", cur.fetchone()[0])
print("OK")
