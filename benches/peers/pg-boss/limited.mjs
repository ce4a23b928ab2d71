// Drains N pre-inserted no-op jobs of a pg-boss `singleton` queue, which lets one job of
// the queue be active at a time fleet-wide (a unique index on active jobs): the
// counterpart of our concurrency limit 1. Prints one JSON line. The database is prepared
// as in drain.mjs; the worker fetches one job at a time, again at once after each.
// Usage: node limited.mjs <connection string> [jobs] [localConcurrency] [max]
import { drainClock, report } from "../peer_common.mjs";
import { prepareDrain, startBoss } from "./common.mjs";

const [conn, jobsArg, concArg, maxArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 2000);
const localConcurrency = Number(concArg ?? 4);
const max = Number(maxArg ?? 8);

const boss = await startBoss(conn, max);
await boss.createQueue("serial", { policy: "singleton" });
await prepareDrain(boss, conn, "serial", jobs);

const clock = drainClock(jobs);
await boss.work(
  "serial",
  { batchSize: 1, localConcurrency, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
  async (batch) => clock.ended(batch.length),
);
const measured = await clock.finished;
await boss.stop({ graceful: true, wait: true });
report("pg-boss", "12.38.0", { policy: "singleton (limit 1)", batchSize: 1, localConcurrency, max }, jobs, measured,
  `limited drain ${jobs}`);
