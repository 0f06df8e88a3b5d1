"""psycopg 3 against walrus: connect, parameterised queries, transactions, errors, COPY.

Run by tests/drivers.rs with the server's port as argv[1]; prints OK on success and
exits non-zero (with the failing assertion) otherwise.
"""
import sys

from decimal import Decimal
import psycopg

port = int(sys.argv[1])
with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="bench", autocommit=False) as conn:
    with conn.cursor() as cur:
        cur.execute("create table drv (id int primary key, name text, amount bigint)")
        conn.commit()
        cur.execute("insert into drv (id, name, amount) values (%s, %s, %s)", (1, "one", 10))
        cur.execute("insert into drv (id, name, amount) values (%s, %s, %s)", (2, "two", 20))
        conn.commit()
        cur.execute("select name, amount from drv where id = %s", (2,))
        assert cur.fetchone() == ("two", 20), "parameterised select"
        # A rolled-back transaction leaves nothing.
        cur.execute("update drv set amount = amount + %s where id = %s", (5, 1))
        conn.rollback()
        cur.execute("select amount from drv where id = 1")
        assert cur.fetchone() == (10,), "rollback"
        # Errors carry SQLSTATEs and the connection recovers after rollback.
        try:
            cur.execute("insert into drv values (%s, %s, %s)", (1, "dup", 0))
            raise AssertionError("duplicate key accepted")
        except psycopg.errors.UniqueViolation as e:
            assert e.sqlstate == "23505", e.sqlstate
        conn.rollback()
        try:
            cur.execute("select * from no_such_table")
            raise AssertionError("missing table accepted")
        except psycopg.errors.UndefinedTable:
            pass
        conn.rollback()
        # Server-side prepared statements.
        for i in range(3, 8):
            cur.execute("insert into drv values (%s, %s, %s)", (i, f"n{i}", i * 10), prepare=True)
        conn.commit()
        # COPY FROM STDIN.
        with cur.copy("copy drv (id, name, amount) from stdin") as cp:
            for i in range(100, 200):
                cp.write_row((i, f"c{i}", i))
        conn.commit()
        cur.execute("select count(*), sum(amount) from drv")
        count, total = cur.fetchone()
        assert count == 107, count
        assert int(total) == 10 + 20 + sum(i * 10 for i in range(3, 8)) + sum(range(100, 200)), total
    # numeric in PostgreSQL's binary wire format, both directions (%b forces binary).
    with conn.cursor() as cur:
        cur.execute("create table drv_num (id int primary key, price numeric)")
        cur.execute("insert into drv_num values (%b, %b)", (1, Decimal("12345.678")))
        cur.execute("insert into drv_num values (%b, %b)", (2, Decimal("-0.0001")))
        conn.commit()
        cur.execute("select price from drv_num order by id", binary=True)
        got = [r[0] for r in cur.fetchall()]
        assert got == [Decimal("12345.678"), Decimal("-0.0001")], got
        cur.execute("select price from drv_num where id = %s", (1,))
        assert cur.fetchone() == (Decimal("12345.678"),)

# Timeouts as PostgreSQL has them (SET used to accept them and do nothing).
import time

with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="bench", autocommit=True) as setup:
    setup.execute("create table drv_lock (id int primary key, v int)")
    setup.execute("insert into drv_lock values (1, 0)")
holder = psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="bench")
holder.execute("update drv_lock set v = 1 where id = 1")  # holds the row lock, open txn
with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="bench", autocommit=True) as other:
    other.execute("set lock_timeout = '200ms'")
    t = time.monotonic()
    try:
        other.execute("update drv_lock set v = 2 where id = 1")
        raise AssertionError("lock_timeout did not end the wait")
    except psycopg.errors.LockNotAvailable as e:
        assert "lock timeout" in str(e), e
    assert time.monotonic() - t < 20
    other.execute("set lock_timeout = 0")
    other.execute("set statement_timeout = '300ms'")
    try:
        other.execute("select pg_sleep(30)")
        raise AssertionError("statement_timeout did not cancel")
    except psycopg.errors.QueryCanceled as e:
        assert "statement timeout" in str(e), e
    assert other.execute("select 1").fetchone() == (1,)
    other.execute("set statement_timeout = 0")
    # The holder idles in its transaction past idle_in_transaction_session_timeout: the
    # server ends its session, which rolls back and frees the row for others at once.
    holder.execute("set idle_in_transaction_session_timeout = '300ms'")
    time.sleep(1.5)
    try:
        holder.execute("select 1")
        raise AssertionError("the idle transaction's session survived")
    except psycopg.errors.IdleInTransactionSessionTimeout:
        pass  # SQLSTATE 25P03, PostgreSQL's FATAL
    except psycopg.OperationalError as e:
        # psycopg before 3.2 (Debian 12's 3.1) reports a FATAL that arrives with the
        # connection's end as a broken connection, keeping the server's message.
        assert "terminating connection due to idle-in-transaction timeout" in str(e), e
    other.execute("set lock_timeout = '5s'")
    other.execute("update drv_lock set v = 3 where id = 1")
    assert other.execute("select v from drv_lock").fetchone() == (3,)
holder.close()

# Cancel: conn.cancel() from another thread stops a long statement with 57014; the
# connection works after it. And the session TimeZone applies to timestamptz text.
import threading

with psycopg.connect(host="127.0.0.1", port=port, user="bench", dbname="bench", autocommit=True) as conn:
    timer = threading.Timer(0.5, conn.cancel)
    timer.start()
    try:
        conn.execute("select pg_sleep(10)")
        raise AssertionError("pg_sleep was not cancelled")
    except psycopg.errors.QueryCanceled as e:
        assert e.sqlstate == "57014", e.sqlstate
    finally:
        timer.cancel()
        # conn.cancel returns once the server has closed the cancel connection, that is
        # after PostgreSQL has sent both of its signals (to the process and to its process
        # group): joining keeps a late second signal off the next statement.
        timer.join()
    assert conn.execute("select 1").fetchone() == (1,)
    conn.execute("set timezone = 'Europe/Berlin'")
    assert conn.info.parameter_status("TimeZone") == "Europe/Berlin", conn.info.parameter_status("TimeZone")
    got = conn.execute("select '2024-01-01 10:00+00'::timestamptz::text").fetchone()[0]
    assert got == "2024-01-01 11:00:00+01", got
print("OK")
