"""asyncpg's COPY against a server: copy_records_to_table (binary COPY FROM STDIN with
the types asyncpg introspects), an error in it, copy_from_table in CSV with a header and
copy_from_query in binary. Prints what it reads; crates/walrus/tests/drivers.rs runs it on
PostgreSQL 15 and on walrus and compares the outputs.

usage: asyncpg_copy_check.py PORT DBNAME
"""

import asyncio
import datetime
import decimal
import io
import sys
import uuid

import asyncpg


async def main(port, db):
    c = await asyncpg.connect(host="127.0.0.1", port=int(port), user="bench", database=db)
    await c.execute("create table ap (id int primary key, n numeric(10,2), t text, v varchar(4), ts timestamptz, b bytea, u uuid, f float8, ok boolean, d date)")
    recs = [(1, decimal.Decimal("1.25"), "x\ty", "abcd", datetime.datetime(2024,1,2,3,4,5,tzinfo=datetime.timezone.utc), b"\x00\x01", uuid.UUID(int=5), 2.5, True, datetime.date(2020,1,1)),
            (2, None, None, None, None, None, None, None, None, None)]
    r = await c.copy_records_to_table("ap", records=recs)
    print(r)
    try:
        await c.copy_records_to_table("ap", records=[(3, None, None, "toolong", None, None, None, None, None, None)])
    except asyncpg.PostgresError as e:
        print("error", e.sqlstate, e)
    rows = await c.fetch("select * from ap order by id")
    for row in rows: print(tuple(row))

    buf = io.BytesIO()
    r = await c.copy_from_table("ap", output=buf, format="csv", header=True)
    print(r); print(buf.getvalue().decode())
    buf = io.BytesIO()
    r = await c.copy_from_query("select id, t from ap order by id", output=buf, format="binary")
    print(r, buf.getvalue().hex())
    await c.close()


asyncio.run(main(sys.argv[1], sys.argv[2]))
print("OK")
