// Drains N pre-inserted no-op jobs with graphile-worker and prints one JSON line.
// Usage: node drain.mjs <connection string> [jobs] [concurrentJobs] [maxPoolSize] [localQueueSize]
// The database is prepared as for every system: schema installed, CHECKPOINT on empty
// tables, one bulk insert, VACUUM ANALYZE.
import { run } from "graphile-worker";
import { drainClock, report } from "../peer_common.mjs";
import { errorsOnly, prepareDrain, tunedWorker } from "./common.mjs";

const [conn, jobsArg, concArg, poolArg, queueArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 50000);
const concurrentJobs = Number(concArg ?? 64);
const maxPoolSize = Number(poolArg ?? 20);
const localQueueSize = Number(queueArg ?? 2000);

await prepareDrain(conn, jobs);

const clock = drainClock(jobs);
const runner = await run({
  noHandleSignals: true,
  taskList: {
    noop: async () => clock.ended(1),
  },
  preset: { worker: tunedWorker(conn, concurrentJobs, maxPoolSize, localQueueSize) },
  logger: errorsOnly,
});
const measured = await clock.finished;
await runner.stop();
report("graphile-worker", "0.18.0", { concurrentJobs, maxPoolSize, localQueueSize, completeJobBatchDelay: 0 }, jobs, measured);
