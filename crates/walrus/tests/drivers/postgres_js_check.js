// postgres.js (npm `postgres` 3) against a server: the program a new user would try.
//
// Run by tests/drivers.rs as `node postgres_js_check.js PORT DATABASE` with NODE_PATH at
// the installed `postgres`, first against PostgreSQL 15 (which proves the program), then
// against walrus. Prints OK on success; a failed check exits non-zero naming what
// differed.
//
// postgres.js prepares every query as a named statement (Parse, Describe, Flush — it
// waits for ParameterDescription before it binds, so an error found while preparing
// must come before Sync), serializes parameters by the described types, reads its
// array types from pg_type at connect (typelem, typarray, typcategory 'A'), and parses
// results by RowDescription's type OIDs (json/jsonb to objects, arrays to JS arrays).

const assert = require("assert");
const postgres = require("postgres");

const [port, database] = process.argv.slice(2);

function row(i) {
  const bytes = [];
  for (let k = 0; k < i % 5; k++) bytes.push((i * 37 + k * 101) % 256);
  const second = String(12 + i).padStart(2, "0");
  return {
    id: i,
    name: i % 3 === 0 ? `név-${i}` : `name ${i}`,
    amount: (i % 2 === 0 ? 1234.5 + i : i - 0.07).toFixed(2),
    at: `2024-01-01 10:11:${second}.123457+05:30`,
    atUtc: `2024-01-01 04:41:${second}.123457+00`,
    ok: i % 2 === 0,
    data: Buffer.from(bytes),
    uid: `a0eebc99-9c0b-4ef8-bb6d-${String(i).padStart(12, "0")}`,
  };
}

function checkRow(got, i) {
  const want = row(i);
  assert.strictEqual(got.id, want.id, "id");
  assert.strictEqual(got.name, want.name, `name of ${i}`);
  assert.strictEqual(got.amount, want.amount, `amount of ${i}`);
  assert.strictEqual(got.at, want.atUtc, `at of ${i}`);
  assert.strictEqual(got.ok, want.ok, `ok of ${i}`);
  assert.ok(want.data.equals(got.data), `data of ${i}: ${got.data && got.data.toString("hex")}`);
  assert.strictEqual(got.uid, want.uid, `uid of ${i}`);
}

async function expectError(promise, code, what) {
  try {
    await promise;
  } catch (e) {
    assert.strictEqual(e.code, code, `${what}: ${e.message}`);
    return;
  }
  throw new Error(`${what}: no error`);
}

// PostgreSQL 15 signals a cancelled backend twice (kill of the process, then of its
// process group). On a loaded machine the second signal can land after the first has
// ended the long statement, and then it cancels the next one. So the statement after a
// cancel may fail with 57014 once, never twice.
async function afterCancel(run) {
  try {
    return await run();
  } catch (e) {
    if (e.code !== "57014") throw e;
    return await run();
  }
}

async function main() {
  const sql = postgres({
    host: "127.0.0.1",
    port: Number(port),
    user: "bench",
    database,
    max: 1,
    onnotice: () => {},
    connection: { TimeZone: "UTC" },
    // timestamptz as its text, so microseconds compare exactly.
    types: {
      tstext: { to: 1184, from: [1184], serialize: (x) => x, parse: (x) => x },
    },
  });
  await sql`drop table if exists pjs_check`;
  await sql`create table pjs_check (id int primary key, name varchar(20), amount numeric(10,2),
    at timestamptz, ok boolean, data bytea, uid uuid)`;
  const insert = (r) =>
    sql`insert into pjs_check (id, name, amount, at, ok, data, uid)
        values (${r.id}, ${r.name}, ${r.amount}, ${sql.types.tstext(r.at)}, ${r.ok}, ${r.data}, ${r.uid})`;
  for (let i = 1; i <= 10; i++) await insert(row(i));
  // Batched: one multi-row insert built from objects.
  const batch = [];
  for (let i = 11; i <= 20; i++) {
    const r = row(i);
    batch.push({ id: r.id, name: r.name, amount: r.amount, at: r.at, ok: r.ok, data: r.data, uid: r.uid });
  }
  await sql`insert into pjs_check ${sql(batch, "id", "name", "amount", "at", "ok", "data", "uid")}`;
  await sql`insert into pjs_check (id) values (${100})`;

  // The same prepared select ten times.
  for (let k = 0; k < 10; k++) {
    const i = 1 + 2 * k;
    const r = await sql`select id, name, amount, at, ok, data, uid from pjs_check where id = ${i}`;
    assert.strictEqual(r.length, 1, `rows for ${i}`);
    checkRow(r[0], i);
  }
  const nulls = await sql`select name, amount, at, ok, data, uid from pjs_check where id = ${100}`;
  assert.deepStrictEqual(Object.values(nulls[0]), [null, null, null, null, null, null], "null row");
  const all = await sql`select id, name, amount, at, ok, data, uid from pjs_check where id < 100 order by id`;
  assert.strictEqual(all.length, 20, "row count");
  all.forEach((r, k) => checkRow(r, k + 1));
  assert.deepStrictEqual(
    all.columns.map((c) => [c.name, c.type]),
    [
      ["id", 23],
      ["name", 1043],
      ["amount", 1700],
      ["at", 1184],
      ["ok", 16],
      ["data", 17],
      ["uid", 2950],
    ],
    "columns"
  );
  assert.ok(all.columns.every((c) => c.table !== 0 && c.number > 0), "table OIDs and numbers");

  // Types drivers round-trip: time, interval, json, jsonb, arrays (parameters and results).
  await sql`drop table if exists pjs_types`;
  await sql`create table pjs_types (id int primary key, t time, iv interval, j json, jb jsonb,
    ia int4[], ta text[])`;
  await sql`insert into pjs_types values (${1}, ${"04:05:06.789"}, ${"1 year 2 mons 3 days 04:05:06"},
    ${sql.json({ b: 1, a: [1, 2] })}, ${sql.json({ b: 1, a: "x" })}, ${[1, 2, 3]}, ${["x y", "", "a\"b"]})`;
  // postgres.js reads a NULL element of an int4[] as NaN: NULLs are checked as text.
  const [t] = await sql`select t, iv, j, jb, ia, ta, jb::text as jbt,
    '{1,NULL}'::int4[]::text as with_null from pjs_types where id = ${1}`;
  assert.strictEqual(t.t, "04:05:06.789", "time");
  assert.strictEqual(t.iv, "1 year 2 mons 3 days 04:05:06", "interval");
  assert.deepStrictEqual(t.j, { b: 1, a: [1, 2] }, "json");
  assert.deepStrictEqual(t.jb, { a: "x", b: 1 }, "jsonb");
  assert.strictEqual(t.jbt, '{"a": "x", "b": 1}', "jsonb text");
  assert.deepStrictEqual(t.ia, [1, 2, 3], "int4[]");
  assert.strictEqual(t.with_null, "{1,NULL}", "int4[] with NULL as text");
  assert.deepStrictEqual(t.ta, ["x y", "", 'a"b'], "text[]");
  const [byArr] = await sql`select id from pjs_types where ia = ${[1, 2, 3]}::int4[]`;
  assert.strictEqual(byArr && byArr.id, 1, "array parameter in a comparison");

  // Rollback undoes.
  await expectError(
    sql.begin(async (tx) => {
      await tx`update pjs_check set amount = amount + ${"1.01"} where id = ${2}`;
      throw Object.assign(new Error("roll back"), { code: "ROLLBACK" });
    }),
    "ROLLBACK",
    "rollback"
  );
  const a = await sql`select amount from pjs_check where id = ${2}`;
  assert.strictEqual(a[0].amount, row(2).amount, "rolled back");

  // A duplicate key inside a transaction, then 25P02 until rollback.
  await expectError(
    sql.begin(async (tx) => {
      const r = row(21);
      await tx`insert into pjs_check (id, name) values (${r.id}, ${r.name})`;
      await expectError(tx`insert into pjs_check (id) values (${1})`, "23505", "duplicate key");
      await expectError(tx`select 1`, "25P02", "aborted transaction");
      throw Object.assign(new Error("roll back"), { code: "ROLLBACK" });
    }),
    "ROLLBACK",
    "aborted block"
  );
  const [n] = await sql`select count(*)::int as n from pjs_check`;
  assert.strictEqual(n.n, 21, "rows after rollback");

  // Errors found while preparing and at run time; the connection goes on.
  await expectError(sql`select nosuch from pjs_check where id = ${1}`, "42703", "unknown column");
  await expectError(sql`select 1 / ${0}::int4`, "22012", "division by zero");
  const [lit] = await sql`select '2024-01-01 10:11:12.123457+05:30'::timestamptz as t, 1234.5::numeric(10,2) as n`;
  assert.strictEqual(lit.t, "2024-01-01 04:41:12.123457+00", "offset literal");
  assert.strictEqual(lit.n, "1234.50", "numeric cast");

  // The session TimeZone (one pooled connection, max: 1): text in the zone, with its
  // offset; the TimeZone of the startup packet was honoured (UTC above).
  await sql`set timezone = 'Asia/Kolkata'`;
  const [tz] = await sql`select '2024-01-01 10:00+00'::timestamptz as w, '2024-01-01 10:00'::timestamptz as l`;
  assert.strictEqual(tz.w, "2024-01-01 15:30:00+05:30", "Kolkata output");
  assert.strictEqual(tz.l, "2024-01-01 10:00:00+05:30", "Kolkata input");
  await sql`set timezone = 'UTC'`;

  // Cancel: query.cancel() sends a cancel request; the query fails with 57014 and the
  // connection works after it.
  const sleep = sql`select pg_sleep(10)`.execute();
  const timer = setTimeout(() => sleep.cancel(), 500);
  await expectError(sleep, "57014", "cancelled pg_sleep");
  clearTimeout(timer);
  const [after] = await afterCancel(() => sql`select 1 as one`);
  assert.strictEqual(after.one, 1, "statement after cancel");

  await sql`drop table pjs_types`;
  await sql`drop table pjs_check`;
  await sql.end();
  console.log("OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
