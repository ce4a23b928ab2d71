// Drains N pre-inserted no-op jobs with graphile-worker and prints one JSON line.
// Usage: node drain.mjs <connection string> [jobs] [concurrentJobs] [maxPoolSize] [localQueueSize]
// The database is prepared as for every system: schema installed, CHECKPOINT on empty
// tables, one bulk insert, VACUUM ANALYZE.
import { Logger, run, makeWorkerUtils } from "graphile-worker";
import pg from "pg";
import { readFileSync } from "node:fs";

const [conn, jobsArg, concArg, poolArg, queueArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 50000);
const concurrentJobs = Number(concArg ?? 64);
const maxPoolSize = Number(poolArg ?? 20);
const localQueueSize = Number(queueArg ?? 2000);

function cpu() {
  const stat = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const busy = stat.slice(0, 8).reduce((a, b) => a + b, 0) - stat[3] - stat[4];
  const own = readFileSync("/proc/self/stat", "utf8").split(")").pop().trim().split(/\s+/);
  return { busy, own: Number(own[11]) + Number(own[12]) };
}

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

let done = 0;
let finish;
const finished = new Promise((resolve) => (finish = resolve));
const t0 = process.hrtime.bigint();
const c0 = cpu();
const runner = await run({
  noHandleSignals: true,
  taskList: {
    noop: async () => {
      done += 1;
      if (done === jobs) finish();
    },
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
await finished;
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const c1 = cpu();
await runner.stop();
const ticks = 100; // USER_HZ
console.log(JSON.stringify({
  system: "graphile-worker",
  version: "0.18.0",
  settings: { concurrentJobs, maxPoolSize, localQueueSize, completeJobBatchDelay: 0 },
  shape: `drain ${jobs}`,
  jobs_per_s: jobs / secs,
  cpu_per_job_us: { machine: ((c1.busy - c0.busy) / ticks / jobs) * 1e6, process: ((c1.own - c0.own) / ticks / jobs) * 1e6 },
}));
