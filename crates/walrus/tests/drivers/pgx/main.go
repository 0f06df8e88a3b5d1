// pgx v5 (Go) against a server: the program a new user would try.
//
// Run by tests/drivers.rs as `pgxcheck PORT DATABASE`, first against PostgreSQL 15
// (which proves the program), then against walrus. Prints OK on success; a failed check
// exits non-zero naming what differed.
//
// pgx prepares each statement (Parse, Describe, Sync), then binds every parameter and
// result in binary by the described types: this checks ParameterDescription,
// RowDescription and each type's binary form. Its CopyFrom sends binary COPY data.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
)

type row struct {
	id     int32
	name   string
	amount string
	at     time.Time
	ok     bool
	data   []byte
	uid    [16]byte
}

func mkrow(i int32) row {
	ist := time.FixedZone("IST", 5*3600+1800)
	name := fmt.Sprintf("name %d", i)
	if i%3 == 0 {
		name = fmt.Sprintf("név-%d", i)
	}
	amount := fmt.Sprintf("%d.93", i-1)
	if i%2 == 0 {
		amount = fmt.Sprintf("%d.50", 1234+i)
	}
	data := make([]byte, i%5)
	for k := range data {
		data[k] = byte((int(i)*37 + k*101) % 256)
	}
	var uid [16]byte
	uid[0], uid[15] = 0xa0, byte(i)
	return row{i, name, amount, time.Date(2024, 1, 1, 10, 11, 12+int(i), 123457000, ist), i%2 == 0, data, uid}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func numericText(n pgtype.Numeric) string {
	v, err := n.Value()
	must(err, "numeric value")
	return fmt.Sprint(v)
}

func checkRow(ctx context.Context, conn *pgx.Conn, i int32) {
	want := mkrow(i)
	var got row
	var amount pgtype.Numeric
	err := conn.QueryRow(ctx, "select id, name, amount, at, ok, data, uid from pgx_check where id = $1", i).
		Scan(&got.id, &got.name, &amount, &got.at, &got.ok, &got.data, &got.uid)
	must(err, fmt.Sprintf("select %d", i))
	if got.id != want.id || got.name != want.name || !got.at.Equal(want.at) || got.ok != want.ok ||
		!bytes.Equal(got.data, want.data) || got.uid != want.uid {
		fail("row %d: want %+v got %+v", i, want, got)
	}
	if numericText(amount) != want.amount {
		fail("amount of %d: want %s got %s", i, want.amount, numericText(amount))
	}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return fmt.Sprint(err)
}

// checkCatalog reads pg_type as pgx's type loader does: binary results scanned by the
// described types (typname as name into a string, typtype as "char" into a byte, oid
// columns as 4-byte oids into uint32), `oid = $1` with the parameter described as oid,
// and conn.LoadType of an array type, which registers it so an int4[] value decodes.
func checkCatalog(ctx context.Context, conn *pgx.Conn) {
	var name string
	var typtype byte
	var oid, elem, array uint32
	must(conn.QueryRow(ctx, "select typname, typtype, oid, typelem, typarray from pg_type where typname = $1", "int4").
		Scan(&name, &typtype, &oid, &elem, &array), "pg_type by name")
	if name != "int4" || typtype != 'b' || oid != 23 || elem != 0 || array != 1007 {
		fail("pg_type int4: %q %q %d %d %d", name, typtype, oid, elem, array)
	}
	must(conn.QueryRow(ctx, "select typname, typtype, typelem from pg_type where oid = $1", uint32(1007)).
		Scan(&name, &typtype, &elem), "pg_type by oid")
	if name != "_int4" || typtype != 'b' || elem != 23 {
		fail("pg_type 1007: %q %q %d", name, typtype, elem)
	}
	var relkind byte
	var relname string
	must(conn.QueryRow(ctx, "select c.relname, c.relkind, c.oid from pg_class c "+
		"join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public' and c.relname = $1", "pgx_check").
		Scan(&relname, &relkind, &oid), "pg_class")
	if relname != "pgx_check" || relkind != 'r' || oid == 0 {
		fail("pg_class pgx_check: %q %q %d", relname, relkind, oid)
	}
	var regclassOid uint32
	must(conn.QueryRow(ctx, "select $1::text::regclass::oid", "pgx_check").Scan(&regclassOid), "regclass oid")
	if regclassOid != oid {
		fail("'pgx_check'::regclass::oid = %d, pg_class.oid = %d", regclassOid, oid)
	}
	t, err := conn.LoadType(ctx, "_int4")
	must(err, "LoadType _int4")
	if t.OID != 1007 {
		fail("LoadType _int4: OID %d", t.OID)
	}
	conn.TypeMap().RegisterType(t)
	var ints []int32
	must(conn.QueryRow(ctx, "select array[3, 1, 2]::int4[]").Scan(&ints), "int4[] after LoadType")
	if len(ints) != 3 || ints[0] != 3 || ints[2] != 2 {
		fail("int4[] after LoadType: %v", ints)
	}
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := fmt.Sprintf("postgres://bench@127.0.0.1:%s/%s?sslmode=disable", os.Args[1], os.Args[2])
	config, err := pgx.ParseConfig(url)
	must(err, "config")
	// A cancelled context sends a cancel request and keeps the connection (pgx's default
	// closes it instead).
	config.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
	}
	conn, err := pgx.ConnectConfig(ctx, config)
	must(err, "connect")
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "drop table if exists pgx_check")
	must(err, "drop")
	_, err = conn.Exec(ctx, "create table pgx_check (id int primary key, name varchar(20), "+
		"amount numeric(10,2), at timestamptz, ok boolean, data bytea, uid uuid)")
	must(err, "create")
	insert := "insert into pgx_check (id, name, amount, at, ok, data, uid) values ($1, $2, $3, $4, $5, $6, $7)"
	for i := int32(1); i <= 10; i++ {
		r := mkrow(i)
		var amount pgtype.Numeric
		must(amount.Scan(r.amount), "numeric")
		_, err = conn.Exec(ctx, insert, r.id, r.name, amount, r.at, r.ok, r.data, r.uid)
		must(err, fmt.Sprintf("insert %d", i))
	}
	batch := &pgx.Batch{}
	for i := int32(11); i <= 20; i++ {
		r := mkrow(i)
		var amount pgtype.Numeric
		must(amount.Scan(r.amount), "numeric")
		batch.Queue(insert, r.id, r.name, amount, r.at, r.ok, r.data, r.uid)
	}
	must(conn.SendBatch(ctx, batch).Close(), "batch")
	_, err = conn.Exec(ctx, insert, 100, nil, nil, nil, nil, nil, nil)
	must(err, "insert nulls")

	for k := int32(0); k < 10; k++ {
		checkRow(ctx, conn, 1+2*k)
	}
	checkCatalog(ctx, conn)
	var name *string
	var at *time.Time
	must(conn.QueryRow(ctx, "select name, at from pgx_check where id = $1", 100).Scan(&name, &at), "null row")
	if name != nil || at != nil {
		fail("null row: %v %v", name, at)
	}
	var count int64
	must(conn.QueryRow(ctx, "select count(*) from pgx_check").Scan(&count), "count")
	if count != 21 {
		fail("count %d", count)
	}

	// Described result types.
	rows, err := conn.Query(ctx, "select id, name, amount, at, ok, data, uid from pgx_check where id = $1", 1)
	must(err, "query")
	var oids []uint32
	for _, f := range rows.FieldDescriptions() {
		oids = append(oids, f.DataTypeOID)
	}
	rows.Close()
	if fmt.Sprint(oids) != "[23 1043 1700 1184 16 17 2950]" {
		fail("field OIDs %v", oids)
	}

	// Rollback undoes; a duplicate key then 25P02 until rollback.
	tx, err := conn.Begin(ctx)
	must(err, "begin")
	_, err = tx.Exec(ctx, "update pgx_check set ok = not ok where id = $1", 2)
	must(err, "update")
	must(tx.Rollback(ctx), "rollback")
	checkRow(ctx, conn, 2)
	tx, err = conn.Begin(ctx)
	must(err, "begin")
	_, err = tx.Exec(ctx, "insert into pgx_check (id) values ($1)", 21)
	must(err, "insert 21")
	_, err = tx.Exec(ctx, "insert into pgx_check (id) values ($1)", 1)
	if sqlState(err) != "23505" {
		fail("duplicate key: %v", err)
	}
	_, err = tx.Exec(ctx, "select 1")
	if sqlState(err) != "25P02" {
		fail("aborted transaction: %v", err)
	}
	must(tx.Rollback(ctx), "rollback")
	must(conn.QueryRow(ctx, "select count(*) from pgx_check").Scan(&count), "count")
	if count != 21 {
		fail("count after rollback %d", count)
	}

	// Errors found while preparing and at run time; the connection goes on.
	_, err = conn.Exec(ctx, "select nosuch from pgx_check where id = $1", 1)
	if sqlState(err) != "42703" {
		fail("unknown column: %v", err)
	}
	_, err = conn.Exec(ctx, "select 1 / $1::int4", 0)
	if sqlState(err) != "22012" {
		fail("division by zero: %v", err)
	}
	var t time.Time
	must(conn.QueryRow(ctx, "select '2024-01-01 10:11:12.123457+05:30'::timestamptz").Scan(&t), "literal")
	if !t.Equal(time.Date(2024, 1, 1, 4, 41, 12, 123457000, time.UTC)) {
		fail("offset literal: %v", t)
	}
	// pgx's CopyFrom: binary COPY FROM STDIN of every column type here, read back
	// like the inserted rows; then a row too long for varchar(20) fails the COPY whole.
	cols := []string{"id", "name", "amount", "at", "ok", "data", "uid"}
	var copyRows [][]any
	for i := int32(200); i < 210; i++ {
		r := mkrow(i)
		var amount pgtype.Numeric
		must(amount.Scan(r.amount), "numeric")
		copyRows = append(copyRows, []any{r.id, r.name, amount, r.at, r.ok, r.data, r.uid})
	}
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{"pgx_check"}, cols, pgx.CopyFromRows(copyRows))
	must(err, "copy from")
	if copied != 10 {
		fail("copied %d rows", copied)
	}
	for i := int32(200); i < 210; i++ {
		checkRow(ctx, conn, i)
	}
	tooLong := [][]any{{int32(300), "fits"}, {int32(301), "this name is longer than twenty"}}
	_, err = conn.CopyFrom(ctx, pgx.Identifier{"pgx_check"}, []string{"id", "name"}, pgx.CopyFromRows(tooLong))
	if sqlState(err) != "22001" {
		fail("copy of a too long value: %v", err)
	}
	must(conn.QueryRow(ctx, "select count(*) from pgx_check where id >= 300").Scan(&count), "count after copy")
	if count != 0 {
		fail("a failed COPY kept %d rows", count)
	}
	// The session TimeZone: binary timestamptz stays UTC microseconds; text follows the zone.
	_, err = conn.Exec(ctx, "set timezone = 'Europe/Berlin'")
	must(err, "set timezone")
	var berlin string
	var local time.Time
	must(conn.QueryRow(ctx, "select '2024-01-01 10:00+00'::timestamptz::text, '2024-07-01 10:00'::timestamptz").
		Scan(&berlin, &local), "Berlin values")
	if berlin != "2024-01-01 11:00:00+01" || !local.Equal(time.Date(2024, 7, 1, 8, 0, 0, 0, time.UTC)) {
		fail("Berlin values: %q %v", berlin, local)
	}
	_, err = conn.Exec(ctx, "set timezone = 'UTC'")
	must(err, "reset timezone")
	// Cancel: a context cancelled during a long statement sends a cancel request; the
	// statement fails with 57014 and the connection works after it.
	sleepCtx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = conn.Exec(sleepCtx, "select pg_sleep(10)")
	stop()
	if sqlState(err) != "57014" {
		fail("cancelled pg_sleep: %v", err)
	}
	// PostgreSQL 15 signals a cancelled backend twice (kill of the process, then of
	// its process group). On a loaded machine the second signal can land after the
	// first has ended pg_sleep, and then it cancels the next statement. So the
	// statement after a cancel may fail with 57014 once, never twice.
	var one int32
	err = conn.QueryRow(ctx, "select 1").Scan(&one)
	if sqlState(err) == "57014" {
		err = conn.QueryRow(ctx, "select 1").Scan(&one)
	}
	must(err, "statement after cancel")
	if one != 1 {
		fail("statement after cancel: %d", one)
	}
	_, err = conn.Exec(ctx, "drop table pgx_check")
	must(err, "drop")
	fmt.Println("OK")
}
