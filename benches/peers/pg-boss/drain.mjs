// Drains N pre-inserted no-op jobs with pg-boss and prints one JSON line.
// Usage: node drain.mjs <connection string> [jobs] [batchSize] [localConcurrency] [max]
// The database is prepared as for every system: schema installed, CHECKPOINT on empty
// tables, one bulk insert, VACUUM ANALYZE. The worker polls every 0.5 s (pg-boss's
// shortest) and fetches back to back while fetches come back full (burstWhenBatchFull).
import { PgBoss } from "pg-boss";
import pg from "pg";
import { drainClock, report } from "../peer_common.mjs";

const [conn, jobsArg, batchArg, concArg, maxArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 50000);
const batchSize = Number(batchArg ?? 500);
const localConcurrency = Number(concArg ?? 4);
const max = Number(maxArg ?? 8);

const boss = new PgBoss({ connectionString: conn, max, supervise: false, schedule: false });
boss.on("error", (e) => console.error(e));
await boss.start();
await boss.createQueue("noop");
const client = new pg.Client({ connectionString: conn });
await client.connect();
await client.query("CHECKPOINT");
const chunk = 5000;
for (let i = 0; i < jobs; i += chunk) {
  const n = Math.min(chunk, jobs - i);
  await boss.insert("noop", Array.from({ length: n }, (_, k) => ({ data: { i: i + k } })));
}
await client.query("VACUUM ANALYZE");
await client.end();

const clock = drainClock(jobs);
await boss.work(
  "noop",
  { batchSize, localConcurrency, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  async (batch) => clock.ended(batch.length),
);
const measured = await clock.finished;
await boss.stop({ graceful: true, wait: true });
report("pg-boss", "12.38.0", { batchSize, localConcurrency, max, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true }, jobs, measured);
