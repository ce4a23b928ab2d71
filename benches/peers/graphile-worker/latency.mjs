// Enqueue-to-start latency of graphile-worker, as our throughput bench's `latency` shape
// measures ours: 3 warm-up jobs, then 200 jobs 50 ms apart to an idle worker and 1,000
// jobs 5 ms apart (a trickle of 200 jobs/s), each enqueued by a producer on its own
// connection; the latency runs from just before the enqueue to the handler's start.
// Prints one JSON line per shape.
// Usage: node latency.mjs <connection string> [jobs] [concurrentJobs] [maxPoolSize]
import { run } from "graphile-worker";
import pg from "pg";
import { latencyReport } from "../peer_common.mjs";
import { errorsOnly, migrate } from "./common.mjs";

const [conn, jobsArg, concArg, poolArg] = process.argv.slice(2);
const jobs = Number(jobsArg ?? 200);
const concurrentJobs = Number(concArg ?? 4);
const maxPoolSize = Number(poolArg ?? 10);

await migrate(conn);
const producer = new pg.Client({ connectionString: conn });
await producer.connect();
await producer.query("CHECKPOINT");

const started = new Map();
const waiting = new Map();
const runner = await run({
  noHandleSignals: true,
  taskList: {
    ping: async (payload) => {
      const at = process.hrtime.bigint();
      started.set(payload.i, at);
      waiting.get(payload.i)?.();
    },
  },
  preset: { worker: { connectionString: conn, concurrentJobs, maxPoolSize, pollInterval: 2000 } },
  logger: errorsOnly,
});
await new Promise((r) => setTimeout(r, 500));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let next = 0;
async function enqueue() {
  const i = next++;
  const at = process.hrtime.bigint();
  await producer.query("SELECT graphile_worker.add_job('ping', json_build_object('i', $1::int))", [i]);
  return { i, at };
}
async function startOf(i) {
  if (!started.has(i)) {
    await new Promise((resolve) => waiting.set(i, resolve));
  }
  return started.get(i);
}

// A run of `n` jobs sent `gap` ms apart: latencies in ms, in sending order.
async function measure(n, gap) {
  const sent = [];
  const t0 = Date.now();
  for (let k = 0; k < n; k++) {
    const wait = t0 + k * gap - Date.now();
    if (wait > 0) await sleep(wait);
    sent.push(await enqueue());
  }
  const latencies = [];
  for (const { i, at } of sent) {
    latencies.push(Number((await startOf(i)) - at) / 1e6);
  }
  return latencies;
}

for (let k = 0; k < 3; k++) {
  const { i } = await enqueue();
  await startOf(i);
  await sleep(50);
}
const settings = { concurrentJobs, maxPoolSize };
latencyReport("graphile-worker", "0.18.0", settings, "latency idle", await measure(jobs, 50));
latencyReport("graphile-worker", "0.18.0", settings, "latency trickle 200/s", await measure(jobs * 5, 5));
await producer.end();
await runner.stop();
