"""asyncpg (Debian's python3-asyncpg) against a server: the program a new user would try.

Run by tests/drivers.rs with the server's port and database as argv[1], argv[2], first
against PostgreSQL 15 (which proves the program), then against walrus. Prints OK on
success and exits non-zero (with the failing assertion) otherwise.

asyncpg prepares every statement with Parse/Describe and a Flush (no Sync) and then
waits, reads the parameter and result types from ParameterDescription and
RowDescription, and sends and receives every value in binary: this checks the extended
protocol's type reporting and each type's binary form.
"""
import asyncio
import datetime
import sys
import uuid
from decimal import Decimal

import asyncpg

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
    same(want[0], got["id"], "id")
    same(want[1], got["name"], "name of %d" % i)
    same(want[2], got["amount"], "amount of %d" % i)
    same(2, -got["amount"].as_tuple().exponent, "amount scale of %d" % i)
    same(want[3], got["at"], "at of %d" % i)
    same(want[4], got["ok"], "ok of %d" % i)
    same(want[5], got["data"], "data of %d" % i)
    same(want[6], got["uid"], "uid of %d" % i)


async def after_cancel(run):
    """PostgreSQL 15 signals a cancelled backend twice (kill of the process, then of its
    process group). On a loaded machine the second signal can land after the first has
    ended the long statement, and then it cancels the next one. So the statement after a
    cancel may fail with 57014 once, never twice."""
    try:
        return await run()
    except asyncpg.exceptions.QueryCanceledError:
        return await run()


async def main():
    conn = await asyncpg.connect(host="127.0.0.1", port=port, user="bench", database=db)
    await conn.execute("drop table if exists apg_check")
    await conn.execute(
        "create table apg_check (id int primary key, name varchar(20), amount numeric(10,2), "
        "at timestamptz, ok boolean, data bytea, uid uuid)"
    )
    insert = "insert into apg_check (id, name, amount, at, ok, data, uid) values ($1, $2, $3, $4, $5, $6, $7)"
    for i in range(1, 6):
        await conn.execute(insert, *row(i))
    await conn.executemany(insert, [row(i) for i in range(6, 21)])
    await conn.execute(insert, 100, None, None, None, None, None, None)

    # A prepared select used ten times; its parameter and column types as described.
    select = await conn.prepare("select id, name, amount, at, ok, data, uid from apg_check where id = $1")
    same(["int4"], [t.name for t in select.get_parameters()], "parameter types")
    same(
        ["int4", "varchar", "numeric", "timestamptz", "bool", "bytea", "uuid"],
        [a.type.name for a in select.get_attributes()],
        "column types",
    )
    for k in range(10):
        i = 1 + 2 * k
        check_row(await select.fetchrow(i), i)
    same((100, None, None, None, None, None, None), tuple(await select.fetchrow(100)), "null row")
    rows = await conn.fetch("select id, name, amount, at, ok, data, uid from apg_check where id < 100 order by id")
    same(20, len(rows), "row count")
    for i, r in enumerate(rows, start=1):
        check_row(r, i)

    # Rollback undoes.
    tr = conn.transaction()
    await tr.start()
    await conn.execute("update apg_check set amount = amount + $1 where id = $2", Decimal("1.01"), 2)
    await tr.rollback()
    same(row(2)[2], await conn.fetchval("select amount from apg_check where id = $1", 2), "rolled back")

    # A duplicate key inside a transaction, then 25P02 until rollback.
    tr = conn.transaction()
    await tr.start()
    await conn.execute(insert, *row(21))
    try:
        await conn.execute(insert, *row(1))
        raise AssertionError("duplicate key accepted")
    except asyncpg.UniqueViolationError as e:
        same("23505", e.sqlstate, "duplicate key state")
    try:
        await conn.fetchval("select 1")
        raise AssertionError("statement ran in an aborted transaction")
    except asyncpg.InFailedSQLTransactionError as e:
        same("25P02", e.sqlstate, "aborted state")
    await tr.rollback()
    same(21, await conn.fetchval("select count(*) from apg_check"), "rows after rollback")

    # Errors found while preparing reach the client (asyncpg waits after a Flush).
    try:
        await asyncio.wait_for(conn.prepare("select nosuch from apg_check where id = $1"), 10)
        raise AssertionError("unknown column accepted")
    except asyncpg.UndefinedColumnError as e:
        same("42703", e.sqlstate, "unknown column state")
    try:
        await asyncio.wait_for(conn.fetchval("select 1 / $1::int4", 0), 10)
        raise AssertionError("division by zero accepted")
    except asyncpg.DivisionByZeroError as e:
        same("22012", e.sqlstate, "division by zero state")
    same(1, await conn.fetchval("select 1"), "after errors")

    # Text input with an offset, and a cast keeping the scale.
    same(
        datetime.datetime(2024, 1, 1, 4, 41, 12, 123457, tzinfo=datetime.timezone.utc),
        await conn.fetchval("select '2024-01-01 10:11:12.123457+05:30'::timestamptz"),
        "offset literal",
    )
    same("1234.50", str(await conn.fetchval("select 1234.5::numeric(10,2)")), "numeric cast")

    # The session TimeZone: binary timestamptz stays UTC microseconds, the text form and
    # input without an offset follow the zone.
    await conn.execute("set timezone = 'Europe/Berlin'")
    same(
        "2024-01-01 11:00:00+01",
        await conn.fetchval("select '2024-01-01 10:00+00'::timestamptz::text"),
        "Berlin text",
    )
    same(
        datetime.datetime(2024, 7, 1, 8, tzinfo=datetime.timezone.utc),
        await conn.fetchval("select '2024-07-01 10:00'::timestamptz"),
        "local input, binary result",
    )
    await conn.execute("set timezone = 'UTC'")

    # Cancel: asyncpg cancels a query whose task is cancelled (here by a timeout) with a
    # cancel request, then waits for the server's answer; the connection works after.
    started = asyncio.get_running_loop().time()
    try:
        await asyncio.wait_for(conn.fetchval("select pg_sleep(10)"), 0.5)
        raise AssertionError("pg_sleep was not cancelled")
    except asyncio.TimeoutError:
        pass
    same(1, await after_cancel(lambda: asyncio.wait_for(conn.fetchval("select 1"), 5)), "statement after cancel")
    assert asyncio.get_running_loop().time() - started < 5, "cancel did not stop pg_sleep"

    # The catalog in binary by its described types: `oid = $1` takes an oid parameter,
    # typname is a name, typtype a "char", oid columns 4-byte oids.
    got = await conn.fetchrow(
        "select typname, typtype, typelem, typarray, typinput from pg_type where oid = $1", 1007
    )
    same(("_int4", b"b", 23, 0, "array_in"), tuple(got), "pg_type 1007")
    got = await conn.fetchrow(
        "select c.oid, c.relkind, c.relname from pg_class c join pg_namespace n"
        " on n.oid = c.relnamespace where n.nspname = $1 and c.relname = $2",
        "public",
        "apg_check",
    )
    same((b"r", "apg_check"), (got["relkind"], got["relname"]), "pg_class apg_check")
    same(got["oid"], await conn.fetchval("select $1::text::regclass::oid", "apg_check"), "regclass oid")
    # Columns of types asyncpg has no built-in codec for (int2vector, int2[], aclitem[],
    # oidvector) make it run its type-introspection query (a recursive one) first.
    got = await conn.fetchrow(
        "select i.indkey, c.conkey, r.relacl, i.indisprimary from pg_index i"
        " join pg_constraint c on c.conindid = i.indexrelid"
        " join pg_class r on r.oid = i.indrelid where i.indrelid = $1",
        got["oid"],
    )
    same(([1], [1], None, True), tuple(got), "pg_index/pg_constraint of apg_check")
    same(True, len(await conn.fetch("select * from pg_class")) > 0, "select * from pg_class")

    await conn.execute("drop table apg_check")
    await conn.close()
    print("OK")


asyncio.run(main())
