// The flow shape with pg-boss: a producer process inserts batches of 10 jobs
// (`boss.insert`, one statement per batch) back to back while the workers run; prints
// the rate of handler calls over the window and the backlog left. As drain.mjs's
// settings.
// Usage: node flow.mjs <connection string> [window s] [batchSize] [localConcurrency] [max]
//        node flow.mjs --produce <connection string>
import pg from "pg";
import { flowRun, produceUntilStopped } from "../peer_common.mjs";
import { startBoss } from "./common.mjs";

if (process.argv[2] === "--produce") {
  const boss = await startBoss(process.argv[3], 2);
  let i = 0;
  await produceUntilStopped(() => boss.insert("noop", Array.from({ length: 10 }, () => ({ data: { i: i++ } }))));
  await boss.stop({ graceful: false, wait: true });
  process.exit(0);
}

const [conn, windowArg, batchArg, concArg, maxArg] = process.argv.slice(2);
const windowSecs = Number(windowArg ?? 10);
const batchSize = Number(batchArg ?? 500);
const localConcurrency = Number(concArg ?? 4);
const max = Number(maxArg ?? 8);

const boss = await startBoss(conn, max);
await boss.createQueue("noop");
const admin = new pg.Client({ connectionString: conn });
await admin.connect();
await admin.query("CHECKPOINT");
const settings = { batchSize, localConcurrency, max, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true };
const flow = await flowRun(
  "pg-boss", "12.38.0", settings,
  [new URL(import.meta.url).pathname, "--produce", conn], windowSecs,
  async () => Number((await admin.query(
    "SELECT count(*) FROM pgboss.job WHERE name = 'noop' AND state IN ('created', 'retry')")).rows[0].count),
);
await boss.work(
  "noop",
  { batchSize, localConcurrency, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  async (batch) => flow.ended(batch.length),
);
await flow.measure();
await boss.stop({ graceful: true, wait: true });
await admin.end();
