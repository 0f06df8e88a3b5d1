// node-postgres (npm `pg` 8) against a server: the program a new user would try.
//
// Run by tests/drivers.rs as `node node_pg_check.js PORT DATABASE` with NODE_PATH at the
// installed `pg`, first against PostgreSQL 15 (which proves the program), then against
// walrus. Prints OK on success; a failed check exits non-zero naming what differed.
//
// node-postgres sends every parameter as untyped text (OID 0) through the extended
// protocol and reads text results by their RowDescription type OIDs; named queries are
// prepared once per connection. Timestamps are read as text (the session's TimeZone is
// set to UTC) so microseconds are compared exactly.

const assert = require("assert");
const { Client, Query, types } = require("pg");

types.setTypeParser(1184, (v) => v); // timestamptz as its text
types.setTypeParser(1700, (v) => v); // numeric as its text (the default too)

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
  const c = new Client({ host: "127.0.0.1", port: Number(port), user: "bench", database });
  await c.connect();
  await c.query("set time zone 'UTC'");
  await c.query("drop table if exists node_check");
  await c.query(
    "create table node_check (id int primary key, name varchar(20), amount numeric(10,2), " +
      "at timestamptz, ok boolean, data bytea, uid uuid)"
  );
  const insert =
    "insert into node_check (id, name, amount, at, ok, data, uid) values ($1, $2, $3, $4, $5, $6, $7)";
  const values = (r) => [r.id, r.name, r.amount, r.at, r.ok, r.data, r.uid];
  for (let i = 1; i <= 10; i++) await c.query(insert, values(row(i)));
  for (let i = 11; i <= 20; i++) await c.query({ name: "ins", text: insert, values: values(row(i)) });
  await c.query(insert, [100, null, null, null, null, null, null]);

  // A named (server-prepared) select ten times.
  for (let k = 0; k < 10; k++) {
    const i = 1 + 2 * k;
    const r = await c.query({
      name: "by_id",
      text: "select id, name, amount, at, ok, data, uid from node_check where id = $1",
      values: [i],
    });
    assert.strictEqual(r.rows.length, 1, `rows for ${i}`);
    checkRow(r.rows[0], i);
  }
  const nulls = await c.query("select name, amount, at, ok, data, uid from node_check where id = $1", [100]);
  assert.deepStrictEqual(Object.values(nulls.rows[0]), [null, null, null, null, null, null], "null row");
  const all = await c.query(
    "select id, name, amount, at, ok, data, uid from node_check where id < 100 order by id"
  );
  assert.strictEqual(all.rows.length, 20, "row count");
  all.rows.forEach((r, k) => checkRow(r, k + 1));
  assert.deepStrictEqual(
    all.fields.map((f) => [f.name, f.dataTypeID, f.dataTypeModifier]),
    [
      ["id", 23, -1],
      ["name", 1043, 24],
      ["amount", 1700, 655366],
      ["at", 1184, -1],
      ["ok", 16, -1],
      ["data", 17, -1],
      ["uid", 2950, -1],
    ],
    "fields"
  );
  assert.ok(all.fields.every((f) => f.tableID !== 0), "table OIDs");

  // Rollback undoes.
  await c.query("begin");
  await c.query("update node_check set amount = amount + $1 where id = $2", ["1.01", 2]);
  await c.query("rollback");
  const a = await c.query("select amount from node_check where id = $1", [2]);
  assert.strictEqual(a.rows[0].amount, row(2).amount, "rolled back");

  // A duplicate key inside a transaction, then 25P02 until rollback.
  await c.query("begin");
  await c.query(insert, values(row(21)));
  await expectError(c.query(insert, values(row(1))), "23505", "duplicate key");
  await expectError(c.query("select 1"), "25P02", "aborted transaction");
  await c.query("rollback");
  const n = await c.query("select count(*) as n from node_check");
  assert.strictEqual(n.rows[0].n, "21", "rows after rollback");

  // Errors found while preparing and at run time; the connection goes on.
  await expectError(c.query("select nosuch from node_check where id = $1", [1]), "42703", "unknown column");
  await expectError(c.query("select 1 / $1::int4", [0]), "22012", "division by zero");
  const lit = await c.query(
    "select '2024-01-01 10:11:12.123457+05:30'::timestamptz as t, 1234.5::numeric(10,2) as n"
  );
  assert.strictEqual(lit.rows[0].t, "2024-01-01 04:41:12.123457+00", "offset literal");
  assert.strictEqual(lit.rows[0].n, "1234.50", "numeric cast");

  // The session TimeZone: timestamptz text in the zone, with its offset.
  await c.query("set timezone = 'America/St_Johns'");
  const tz = await c.query(
    "select '2024-01-01 10:00+00'::timestamptz as w, '2024-07-01 10:00'::timestamptz::text as s"
  );
  assert.strictEqual(tz.rows[0].w, "2024-01-01 06:30:00-03:30", "St. John's winter");
  assert.strictEqual(tz.rows[0].s, "2024-07-01 10:00:00-02:30", "St. John's summer input");
  await c.query("set timezone = 'UTC'");

  // Cancel: a cancel request (sent by another Client on its own connection) stops a
  // long statement with 57014; the connection works after it.
  const sleep = c.query(new Query("select pg_sleep(10)"));
  const outcome = new Promise((resolve) => {
    sleep.on("error", resolve);
    sleep.on("end", () => resolve(null));
  });
  const timer = setTimeout(
    () => new Client({ host: "127.0.0.1", port: Number(port), user: "bench", database }).cancel(c, sleep),
    500
  );
  const cancelled = await outcome;
  clearTimeout(timer);
  assert.ok(cancelled, "pg_sleep was not cancelled");
  assert.strictEqual(cancelled.code, "57014", `cancel: ${cancelled.message}`);
  const after = await afterCancel(() => c.query("select 1 as one"));
  assert.strictEqual(after.rows[0].one, 1, "statement after cancel");

  await c.query("drop table node_check");
  await c.end();
  console.log("OK");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
