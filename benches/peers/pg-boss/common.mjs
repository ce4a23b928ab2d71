// What the pg-boss drivers share: a started instance, and preparing the database as for
// every system.
import { PgBoss } from "pg-boss";
import pg from "pg";

// A started pg-boss on `conn` with a pool of `max`, its maintenance and scheduling off
// (they would compete with the measured work), errors printed.
export async function startBoss(conn, max) {
  const boss = new PgBoss({ connectionString: conn, max, supervise: false, schedule: false });
  boss.on("error", (e) => console.error(e));
  await boss.start();
  return boss;
}

// CHECKPOINT on empty tables, `jobs` no-op jobs of `queue` inserted 5,000 to a statement,
// VACUUM ANALYZE: the preparation every system's drain gets.
export async function prepareDrain(boss, conn, queue, jobs) {
  const client = new pg.Client({ connectionString: conn });
  await client.connect();
  await client.query("CHECKPOINT");
  const chunk = 5000;
  for (let i = 0; i < jobs; i += chunk) {
    const n = Math.min(chunk, jobs - i);
    await boss.insert(queue, Array.from({ length: n }, (_, k) => ({ data: { i: i + k } })));
  }
  await client.query("VACUUM ANALYZE");
  await client.end();
}
