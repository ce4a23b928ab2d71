// The flow shape with graphile-worker: a producer process adds batches of 10 jobs
// (`graphile_worker.add_jobs`, one statement per batch on one connection) back to back
// while the workers run; prints the rate of handler calls over the window and the
// backlog left. As drain.mjs's settings.
// Usage: node flow.mjs <connection string> [window s] [concurrentJobs] [maxPoolSize] [localQueueSize]
//        node flow.mjs --produce <connection string>
import { run } from "graphile-worker";
import pg from "pg";
import { flowRun, produceUntilStopped } from "../peer_common.mjs";
import { errorsOnly, migrate, tunedWorker } from "./common.mjs";

const ADD_TEN = `SELECT graphile_worker.add_jobs(array(
  SELECT ROW('noop', json_build_object('i', i), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM generate_series(1, 10) AS i))`;

if (process.argv[2] === "--produce") {
  const client = new pg.Client({ connectionString: process.argv[3] });
  await client.connect();
  await produceUntilStopped(() => client.query(ADD_TEN));
  await client.end();
  process.exit(0);
}

const [conn, windowArg, concArg, poolArg, queueArg] = process.argv.slice(2);
const windowSecs = Number(windowArg ?? 10);
const concurrentJobs = Number(concArg ?? 64);
const maxPoolSize = Number(poolArg ?? 20);
const localQueueSize = Number(queueArg ?? 2000);

await migrate(conn);
const admin = new pg.Client({ connectionString: conn });
await admin.connect();
await admin.query("CHECKPOINT");
const settings = { concurrentJobs, maxPoolSize, localQueueSize, completeJobBatchDelay: 0 };
const flow = await flowRun(
  "graphile-worker", "0.18.0", settings,
  [new URL(import.meta.url).pathname, "--produce", conn], windowSecs,
  async () => Number((await admin.query("SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL")).rows[0].count),
);
const runner = await run({
  noHandleSignals: true,
  taskList: { noop: async () => flow.ended(1) },
  preset: { worker: tunedWorker(conn, concurrentJobs, maxPoolSize, localQueueSize) },
  logger: errorsOnly,
});
await flow.measure();
await runner.stop();
await admin.end();
