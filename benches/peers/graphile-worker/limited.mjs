// Drains N pre-inserted no-op jobs of one named queue with graphile-worker, which runs a
// named queue's jobs one at a time fleet-wide: the counterpart of our concurrency limit 1.
// Prints one JSON line. The database is prepared as in drain.mjs.
// Usage: node limited.mjs <connection string> [jobs] [concurrentJobs] [maxPoolSize]
import { run } from "graphile-worker";
import { drainClock, report } from "../peer_common.mjs";
import { errorsOnly, prepareDrain } from "./common.mjs";

const [conn, jobsArg, concArg, poolArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 2000);
const concurrentJobs = Number(concArg ?? 16);
const maxPoolSize = Number(poolArg ?? 10);

await prepareDrain(conn, jobs, "serial");

const clock = drainClock(jobs);
const runner = await run({
  noHandleSignals: true,
  taskList: { noop: async () => clock.ended(1) },
  preset: {
    worker: { connectionString: conn, concurrentJobs, maxPoolSize, pollInterval: 1000, completeJobBatchDelay: 0 },
  },
  logger: errorsOnly,
});
const measured = await clock.finished;
await runner.stop();
report("graphile-worker", "0.18.0", { queue_name: "serial (limit 1)", concurrentJobs, maxPoolSize }, jobs, measured,
  `limited drain ${jobs}`);
