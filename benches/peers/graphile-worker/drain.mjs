// Drains N pre-inserted no-op jobs with graphile-worker and prints one JSON line.
// Usage: node drain.mjs <connection string> [jobs] [concurrentJobs] [maxPoolSize] [localQueueSize]
// The database is prepared as for every system: schema installed, CHECKPOINT on empty
// tables, one bulk insert, VACUUM ANALYZE.
import { Logger, run, makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { drainClock, report } from "../peer_common.mjs";

const [conn, jobsArg, concArg, poolArg, queueArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 50000);
const concurrentJobs = Number(concArg ?? 64);
const maxPoolSize = Number(poolArg ?? 20);
const localQueueSize = Number(queueArg ?? 2000);

const utils = await makeWorkerUtils({ connectionString: conn });
await utils.migrate();
await utils.release();
const client = new pg.Client({ connectionString: conn });
await client.connect();
await client.query("CHECKPOINT");
await client.query(
  `SELECT graphile_worker.add_jobs(array(
     SELECT ROW('noop', json_build_object('i', i), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
       FROM generate_series(1, $1::int) AS i))`,
  [jobs],
);
await client.query("VACUUM ANALYZE");
await client.end();

const clock = drainClock(jobs);
const runner = await run({
  noHandleSignals: true,
  taskList: {
    noop: async () => clock.ended(1),
  },
  preset: {
    worker: {
      connectionString: conn,
      concurrentJobs,
      maxPoolSize,
      pollInterval: 1000,
      localQueue: { size: localQueueSize },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
  // Errors only: the job-by-job info lines would cost as much as the jobs.
  logger: new Logger(() => (level, message) => {
    if (level === "error") console.error(message);
  }),
});
const measured = await clock.finished;
await runner.stop();
report("graphile-worker", "0.18.0", { concurrentJobs, maxPoolSize, localQueueSize, completeJobBatchDelay: 0 }, jobs, measured);
