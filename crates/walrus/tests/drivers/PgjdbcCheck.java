// pgjdbc (the PostgreSQL JDBC driver) against a server: the program a new user would try.
//
// Run by tests/drivers.rs as a single-file Java program (`java -cp postgresql.jar
// PgjdbcCheck.java PORT DATABASE`), against PostgreSQL 15 (which proves the program) and against
// walrus. Prints OK on success; any failed check throws, naming what differed.
//
// Steps: connect; create a table with int, varchar(20), numeric(10,2), timestamptz,
// boolean, bytea and uuid columns; typed PreparedStatement inserts, one by one and batched; select by id
// ten times (pgjdbc switches to a named server-side statement at the fifth use,
// prepareThreshold=5); every value round-trips exactly; ResultSetMetaData reports the
// declared types, sizes, precision and scale; rollback undoes; a duplicate key inside a
// transaction fails with 23505 and the next statement fails with 25P02 until rollback;
// the connection works after the error; DatabaseMetaData getColumns, getPrimaryKeys and
// getIndexInfo answer as PostgreSQL does.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Arrays;
import java.util.Objects;
import java.util.UUID;
import java.util.Properties;

public class PgjdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void same(Object want, Object got, String what) {
        if (!Objects.equals(want, got)) {
            throw new AssertionError(what + ": want <" + want + "> got <" + got + ">");
        }
    }

    /** Row i's values: every column type, with fractional seconds and negative numbers. */
    static String name(int i) {
        return i % 3 == 0 ? "név-" + i : "name " + i;
    }

    static BigDecimal amount(int i) {
        return new BigDecimal(i % 2 == 0 ? "1234.50" : "-0.07").add(BigDecimal.valueOf(i));
    }

    static OffsetDateTime at(int i) {
        return OffsetDateTime.of(2024, 1, 1, 10, 11, 12, 123457000, ZoneOffset.ofHoursMinutes(5, 30))
                .plusMinutes(i);
    }

    /** Every byte value, zero included, over the rows. */
    static byte[] data(int i) {
        byte[] b = new byte[i % 5];
        for (int k = 0; k < b.length; k++) {
            b[k] = (byte) (i * 37 + k * 101);
        }
        return b;
    }

    static UUID uid(int i) {
        return new UUID(0xa0eebc999c0b4ef8L + i, 0xbb6d6bb9bd380a11L * (i + 1));
    }

    static void insert(PreparedStatement ps, int i) throws SQLException {
        ps.setInt(1, i);
        ps.setString(2, name(i));
        ps.setBigDecimal(3, amount(i));
        ps.setObject(4, at(i));
        ps.setBoolean(5, i % 2 == 0);
        ps.setBytes(6, data(i));
        ps.setObject(7, uid(i));
    }

    static void verifyRow(ResultSet rs, int i) throws SQLException {
        same(i, rs.getInt("id"), "id");
        same(name(i), rs.getString("name"), "name of " + i);
        same(amount(i).setScale(2), rs.getBigDecimal("amount"), "amount of " + i);
        OffsetDateTime got = rs.getObject("at", OffsetDateTime.class);
        same(at(i).toInstant(), got.toInstant(), "at of " + i);
        Timestamp ts = rs.getTimestamp("at");
        same(at(i).toInstant(), ts.toInstant(), "at as Timestamp of " + i);
        same(i % 2 == 0, rs.getBoolean("ok"), "ok of " + i);
        check(Arrays.equals(data(i), rs.getBytes("data")),
                "data of " + i + ": " + Arrays.toString(rs.getBytes("data")));
        same(uid(i), rs.getObject("uid", UUID.class), "uid of " + i);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/" + args[1];
        Properties props = new Properties();
        props.setProperty("user", "bench");
        try (Connection c = DriverManager.getConnection(url, props)) {
            try (Statement st = c.createStatement()) {
                st.execute("drop table if exists jdbc_check");
                st.execute("create table jdbc_check (id int primary key, name varchar(20), "
                        + "amount numeric(10,2), at timestamptz, ok boolean, data bytea, uid uuid)");
            }
            // Typed inserts: one at a time (past the prepare threshold), then a batch.
            try (PreparedStatement ps = c.prepareStatement(
                    "insert into jdbc_check (id, name, amount, at, ok, data, uid) values (?, ?, ?, ?, ?, ?, ?)")) {
                for (int i = 1; i <= 8; i++) {
                    insert(ps, i);
                    same(1, ps.executeUpdate(), "insert " + i);
                }
                for (int i = 9; i <= 20; i++) {
                    insert(ps, i);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                same(12, counts.length, "batch size");
                for (int n : counts) {
                    check(n == 1 || n == Statement.SUCCESS_NO_INFO, "batch count " + n);
                }
            }
            // A NULL of each type.
            try (PreparedStatement ps = c.prepareStatement(
                    "insert into jdbc_check (id, name, amount, at, ok, data, uid) values (?, ?, ?, ?, ?, ?, ?)")) {
                ps.setInt(1, 100);
                ps.setNull(2, Types.VARCHAR);
                ps.setNull(3, Types.NUMERIC);
                ps.setNull(4, Types.TIMESTAMP_WITH_TIMEZONE);
                ps.setNull(5, Types.BOOLEAN);
                ps.setNull(6, Types.BINARY);
                ps.setNull(7, Types.OTHER);
                same(1, ps.executeUpdate(), "insert nulls");
            }
            // Select by id ten times: the statement becomes server-prepared at the fifth.
            try (PreparedStatement ps = c.prepareStatement(
                    "select id, name, amount, at, ok, data, uid from jdbc_check where id = ?")) {
                for (int round = 0; round < 10; round++) {
                    int i = 1 + round * 2;
                    ps.setInt(1, i);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "row " + i + " found");
                        verifyRow(rs, i);
                        check(!rs.next(), "one row for " + i);
                    }
                }
                ps.setInt(1, 100);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "null row");
                    same(null, rs.getString("name"), "null varchar");
                    same(null, rs.getBigDecimal("amount"), "null numeric");
                    same(null, rs.getObject("at", OffsetDateTime.class), "null timestamptz");
                    same(null, rs.getBytes("data"), "null bytea");
                    same(null, rs.getObject("uid", UUID.class), "null uuid");
                    rs.getBoolean("ok");
                    check(rs.wasNull(), "null boolean");
                }
            }
            // All rows with a plain statement (text results) too.
            try (Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery(
                            "select id, name, amount, at, ok, data, uid from jdbc_check where id < 100 order by id")) {
                int n = 0;
                while (rs.next()) {
                    n++;
                    verifyRow(rs, n);
                }
                same(20, n, "row count");
            }
            // The metadata drivers and tools read.
            try (PreparedStatement ps = c.prepareStatement(
                    "select id, name, amount, at, ok, data, uid from jdbc_check where id = ?")) {
                ps.setInt(1, 1);
                try (ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData md = rs.getMetaData();
                    same(7, md.getColumnCount(), "column count");
                    same(Types.INTEGER, md.getColumnType(1), "id type");
                    same("int4", md.getColumnTypeName(1), "id type name");
                    same(Types.VARCHAR, md.getColumnType(2), "name type");
                    same("varchar", md.getColumnTypeName(2), "name type name");
                    same(20, md.getPrecision(2), "varchar(20) precision");
                    same(20, md.getColumnDisplaySize(2), "varchar(20) display size");
                    same(Types.NUMERIC, md.getColumnType(3), "amount type");
                    same(10, md.getPrecision(3), "numeric(10,2) precision");
                    same(2, md.getScale(3), "numeric(10,2) scale");
                    same(Types.TIMESTAMP, md.getColumnType(4), "at type");
                    same("timestamptz", md.getColumnTypeName(4), "at type name");
                    same(Types.BIT, md.getColumnType(5), "ok type");
                    same("bool", md.getColumnTypeName(5), "ok type name");
                    same("java.math.BigDecimal", md.getColumnClassName(3), "amount class");
                    same(Types.BINARY, md.getColumnType(6), "data type");
                    same("bytea", md.getColumnTypeName(6), "data type name");
                    same(Types.OTHER, md.getColumnType(7), "uid type");
                    same("uuid", md.getColumnTypeName(7), "uid type name");
                }
            }
            // DatabaseMetaData.getColumns (its query uses current_database, row_number()
            // OVER (PARTITION BY ... ORDER BY ...), pg_get_expr and outer joins on pg_attrdef
            // and pg_description).
            try (ResultSet rs = c.getMetaData().getColumns(null, "public", "jdbc_check", null)) {
                String[] names = {"id", "name", "amount", "at", "ok", "data", "uid"};
                String[] types = {"int4", "varchar", "numeric", "timestamptz", "bool", "bytea", "uuid"};
                for (int i = 0; i < names.length; i++) {
                    check(rs.next(), "getColumns row " + (i + 1));
                    same(names[i], rs.getString("COLUMN_NAME"), "getColumns name " + (i + 1));
                    same(types[i], rs.getString("TYPE_NAME"), "getColumns type " + (i + 1));
                    same(i + 1, rs.getInt("ORDINAL_POSITION"), "getColumns position " + (i + 1));
                }
                check(!rs.next(), "getColumns rows");
            }
            try (ResultSet rs = c.getMetaData().getColumns(null, "public", "jdbc_check", "name")) {
                check(rs.next(), "getColumns name row");
                same(20, rs.getInt("COLUMN_SIZE"), "varchar(20) COLUMN_SIZE");
                same("YES", rs.getString("IS_NULLABLE"), "name IS_NULLABLE");
            }
            // DatabaseMetaData.getPrimaryKeys (its query calls the set-returning
            // information_schema._pg_expandarray in a select list): a two-column key in
            // key order, not column order.
            try (Statement st = c.createStatement()) {
                st.execute("drop table if exists jdbc_pk");
                st.execute("create table jdbc_pk (a int, b int, c int, primary key (c, a))");
            }
            try (ResultSet rs = c.getMetaData().getPrimaryKeys(null, "public", "jdbc_pk")) {
                String[] keyColumns = {"c", "a"};
                for (int i = 0; i < keyColumns.length; i++) {
                    check(rs.next(), "getPrimaryKeys row " + (i + 1));
                    same("jdbc_pk", rs.getString("TABLE_NAME"), "getPrimaryKeys table");
                    same(keyColumns[i], rs.getString("COLUMN_NAME"), "getPrimaryKeys column " + (i + 1));
                    same(i + 1, rs.getInt("KEY_SEQ"), "getPrimaryKeys KEY_SEQ " + (i + 1));
                    same("jdbc_pk_pkey", rs.getString("PK_NAME"), "getPrimaryKeys PK_NAME");
                }
                check(!rs.next(), "getPrimaryKeys rows");
            }
            try (Statement st = c.createStatement()) {
                st.execute("drop table jdbc_pk");
            }
            // DatabaseMetaData.getIndexInfo (its query subscripts pg_index.indoption, an
            // int2vector counted from 0, ANDs it with 1::smallint, calls
            // _pg_expandarray(indkey) in a select list and the three-argument
            // pg_get_indexdef): a primary key, a unique index and a two-column index in
            // key order, ordered by NON_UNIQUE, TYPE, INDEX_NAME, ORDINAL_POSITION.
            try (Statement st = c.createStatement()) {
                st.execute("drop table if exists jdbc_idx");
                st.execute("create table jdbc_idx (id int primary key, code varchar(10), a int, b int)");
                st.execute("create unique index jdbc_idx_code on jdbc_idx (code)");
                st.execute("create index jdbc_idx_ba on jdbc_idx (b, a)");
            }
            String[][] indexRows = {
                // NON_UNIQUE, INDEX_NAME, ORDINAL_POSITION, COLUMN_NAME
                {"false", "jdbc_idx_code", "1", "code"},
                {"false", "jdbc_idx_pkey", "1", "id"},
                {"true", "jdbc_idx_ba", "1", "b"},
                {"true", "jdbc_idx_ba", "2", "a"},
            };
            for (boolean uniqueOnly : new boolean[] {false, true}) {
                try (ResultSet rs = c.getMetaData().getIndexInfo(null, "public", "jdbc_idx", uniqueOnly, false)) {
                    int want = uniqueOnly ? 2 : indexRows.length;
                    for (int i = 0; i < want; i++) {
                        String what = "getIndexInfo(unique=" + uniqueOnly + ") row " + (i + 1);
                        check(rs.next(), what);
                        same("public", rs.getString("TABLE_SCHEM"), what + " TABLE_SCHEM");
                        same("jdbc_idx", rs.getString("TABLE_NAME"), what + " TABLE_NAME");
                        same(Boolean.valueOf(indexRows[i][0]), rs.getBoolean("NON_UNIQUE"), what + " NON_UNIQUE");
                        same(null, rs.getString("INDEX_QUALIFIER"), what + " INDEX_QUALIFIER");
                        same(indexRows[i][1], rs.getString("INDEX_NAME"), what + " INDEX_NAME");
                        same((int) java.sql.DatabaseMetaData.tableIndexOther, rs.getInt("TYPE"), what + " TYPE");
                        same(Integer.parseInt(indexRows[i][2]), rs.getInt("ORDINAL_POSITION"), what + " ORDINAL_POSITION");
                        same(indexRows[i][3], rs.getString("COLUMN_NAME"), what + " COLUMN_NAME");
                        same("A", rs.getString("ASC_OR_DESC"), what + " ASC_OR_DESC");
                        same(null, rs.getString("FILTER_CONDITION"), what + " FILTER_CONDITION");
                        same(null, rs.getString("REMARKS"), what + " REMARKS");
                    }
                    check(!rs.next(), "getIndexInfo(unique=" + uniqueOnly + ") rows");
                }
            }
            try (Statement st = c.createStatement()) {
                st.execute("drop table jdbc_idx");
            }
            // Rollback undoes.
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement(
                    "update jdbc_check set amount = amount + ? where id = ?")) {
                ps.setBigDecimal(1, new BigDecimal("1.01"));
                ps.setInt(2, 2);
                same(1, ps.executeUpdate(), "update");
            }
            c.rollback();
            try (PreparedStatement ps = c.prepareStatement("select amount from jdbc_check where id = ?")) {
                ps.setInt(1, 2);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "row 2");
                    same(amount(2).setScale(2), rs.getBigDecimal(1), "rolled back amount");
                }
            }
            c.commit();
            // A duplicate key inside a transaction: 23505, then 25P02 until rollback.
            try (PreparedStatement ps = c.prepareStatement(
                    "insert into jdbc_check (id, name, amount, at, ok, data, uid) values (?, ?, ?, ?, ?, ?, ?)")) {
                insert(ps, 21);
                ps.executeUpdate();
                insert(ps, 1);
                try {
                    ps.executeUpdate();
                    throw new AssertionError("duplicate key accepted");
                } catch (SQLException e) {
                    same("23505", e.getSQLState(), "duplicate key state");
                }
                try (Statement st = c.createStatement()) {
                    st.executeQuery("select 1");
                    throw new AssertionError("statement ran in an aborted transaction");
                } catch (SQLException e) {
                    same("25P02", e.getSQLState(), "aborted transaction state");
                }
            }
            c.rollback();
            c.setAutoCommit(true);
            // The statement after the error works, and row 21 was rolled back.
            try (Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery("select count(*) from jdbc_check")) {
                check(rs.next(), "count");
                same(21L, rs.getLong(1), "rows after rollback");
            }
            // Errors found while preparing reach the client and the connection goes on.
            try (PreparedStatement ps = c.prepareStatement("select nosuch from jdbc_check where id = ?")) {
                ps.setInt(1, 1);
                ps.executeQuery();
                throw new AssertionError("unknown column accepted");
            } catch (SQLException e) {
                same("42703", e.getSQLState(), "unknown column state");
            }
            try (PreparedStatement ps = c.prepareStatement("select 1 / ?")) {
                ps.setInt(1, 0);
                ps.executeQuery();
                throw new AssertionError("division by zero accepted");
            } catch (SQLException e) {
                same("22012", e.getSQLState(), "division by zero state");
            }
            // Timestamps sent as text with an offset are stored as the instant they name.
            try (Statement st = c.createStatement()) {
                st.execute("insert into jdbc_check (id, at) values (200, '2024-01-01 10:11:12.123457+05:30')");
                try (ResultSet rs = st.executeQuery("select at from jdbc_check where id = 200")) {
                    check(rs.next(), "row 200");
                    same(Instant.parse("2024-01-01T04:41:12.123457Z"),
                            rs.getObject(1, OffsetDateTime.class).toInstant(), "offset literal");
                }
                try (ResultSet rs = st.executeQuery("select 1234.5::numeric(10,2)")) {
                    check(rs.next(), "numeric cast");
                    same(new BigDecimal("1234.50"), rs.getBigDecimal(1), "numeric cast keeps the scale");
                }
                st.execute("drop table jdbc_check");
            }
            // Cancel: Statement.cancel from another thread sends a cancel request; the
            // statement fails with 57014 and the connection works after it.
            try (Statement st = c.createStatement()) {
                Thread canceller = new Thread(() -> {
                    try {
                        Thread.sleep(500);
                        st.cancel();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                canceller.start();
                try {
                    st.executeQuery("select pg_sleep(10)");
                    throw new AssertionError("pg_sleep was not cancelled");
                } catch (SQLException e) {
                    same("57014", e.getSQLState(), "cancelled state");
                }
                canceller.join();
                try (ResultSet rs = st.executeQuery("select 1")) {
                    check(rs.next(), "after cancel");
                    same(1, rs.getInt(1), "statement after cancel");
                }
            }
        }
        // pgjdbc sends the JVM's time zone in the startup packet: the session reads and
        // prints timestamptz in it.
        java.util.TimeZone.setDefault(java.util.TimeZone.getTimeZone("Europe/Berlin"));
        try (Connection c = DriverManager.getConnection(url, props);
                Statement st = c.createStatement();
                ResultSet rs = st.executeQuery("select current_setting('TimeZone'), "
                        + "'2024-01-01 10:00+00'::timestamptz::text, '2024-07-01 10:00'::timestamptz")) {
            check(rs.next(), "time zone row");
            same("Europe/Berlin", rs.getString(1), "startup TimeZone");
            same("2024-01-01 11:00:00+01", rs.getString(2), "Berlin text");
            same(Instant.parse("2024-07-01T08:00:00Z"),
                    rs.getObject(3, OffsetDateTime.class).toInstant(), "Berlin local input");
        }
        System.out.println("OK");
    }
}
