// Drains N pre-inserted no-op jobs with pg-boss and prints one JSON line.
// Usage: node drain.mjs <connection string> [jobs] [batchSize] [localConcurrency] [max]
// The database is prepared as for every system: schema installed, CHECKPOINT on empty
// tables, one bulk insert, VACUUM ANALYZE. The worker polls every 0.5 s (pg-boss's
// shortest) and fetches back to back while fetches come back full (burstWhenBatchFull).
import { drainClock, report } from "../peer_common.mjs";
import { prepareDrain, startBoss } from "./common.mjs";

const [conn, jobsArg, batchArg, concArg, maxArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 50000);
const batchSize = Number(batchArg ?? 500);
const localConcurrency = Number(concArg ?? 4);
const max = Number(maxArg ?? 8);

const boss = await startBoss(conn, max);
await boss.createQueue("noop");
await prepareDrain(boss, conn, "noop", jobs);

const clock = drainClock(jobs);
await boss.work(
  "noop",
  { batchSize, localConcurrency, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  async (batch) => clock.ended(batch.length),
);
const measured = await clock.finished;
await boss.stop({ graceful: true, wait: true });
report("pg-boss", "12.38.0", { batchSize, localConcurrency, max, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true }, jobs, measured);
