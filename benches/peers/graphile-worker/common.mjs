// What the graphile-worker drivers share: installing the schema, preparing the database
// as for every system, and a logger that keeps only errors.
import { Logger, makeWorkerUtils } from "graphile-worker";
import pg from "pg";

// Installs (or migrates) graphile-worker's schema.
export async function migrate(conn) {
  const utils = await makeWorkerUtils({ connectionString: conn });
  await utils.migrate();
  await utils.release();
}

// CHECKPOINT on empty tables, `jobs` no-op jobs (of the named queue `queueName`, if any)
// in one insert, VACUUM ANALYZE: the preparation every system's drain gets.
export async function prepareDrain(conn, jobs, queueName = null) {
  await migrate(conn);
  const client = new pg.Client({ connectionString: conn });
  await client.connect();
  await client.query("CHECKPOINT");
  await client.query(
    `SELECT graphile_worker.add_jobs(array(
       SELECT ROW('noop', json_build_object('i', i), $2::text, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
         FROM generate_series(1, $1::int) AS i))`,
    [jobs, queueName],
  );
  await client.query("VACUUM ANALYZE");
  await client.end();
}

// Errors only: the job-by-job info lines would cost as much as the jobs.
export const errorsOnly = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});

// The worker settings of the drain and the flow: concurrency, pool and local queue as
// given, a 1 s poll (notifications wake it sooner) and no batching delay on completion.
export function tunedWorker(conn, concurrentJobs, maxPoolSize, localQueueSize) {
  return {
    connectionString: conn,
    concurrentJobs,
    maxPoolSize,
    pollInterval: 1000,
    localQueue: { size: localQueueSize },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  };
}
