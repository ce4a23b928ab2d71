// What every Node.js peer driver shares: the drain's clock (wall time and CPU counters)
// and the one JSON line it prints.
import { readFileSync } from "node:fs";

const TICKS = 100; // USER_HZ

// Busy jiffies of the whole machine, and this process's user and system jiffies.
function cpu() {
  const stat = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const busy = stat.slice(0, 8).reduce((a, b) => a + b, 0) - stat[3] - stat[4];
  const own = readFileSync("/proc/self/stat", "utf8").split(")").pop().trim().split(/\s+/);
  return { busy, own: Number(own[11]) + Number(own[12]) };
}

// Starts timing a drain of `jobs`: `ended(n)` counts finished jobs, and `finished`
// resolves with the wall time and CPU counters when the last one ends.
export function drainClock(jobs) {
  const t0 = process.hrtime.bigint();
  const c0 = cpu();
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  return {
    ended(n) {
      done += n;
      if (finish && done >= jobs) {
        finish({ secs: Number(process.hrtime.bigint() - t0) / 1e9, c0, c1: cpu() });
        finish = null;
      }
    },
    finished,
  };
}

// Machine and process CPU per job, in µs, between two `cpu()` readings.
function cpuPerJob(c0, c1, jobs) {
  return {
    machine: ((c1.busy - c0.busy) / TICKS / jobs) * 1e6,
    process: ((c1.own - c0.own) / TICKS / jobs) * 1e6,
  };
}

// Prints the driver's result in the format compare.sh reads; `run` is what
// `drainClock(jobs).finished` resolved with.
export function report(system, version, settings, jobs, run, shape = `drain ${jobs}`) {
  const { secs, c0, c1 } = run;
  console.log(JSON.stringify({
    system,
    version,
    settings,
    shape,
    jobs_per_s: jobs / secs,
    cpu_per_job_us: cpuPerJob(c0, c1, jobs),
  }));
}

// Prints a latency shape's result (`latencies` in ms) in the format compare.sh reads.
export function latencyReport(system, version, settings, shape, latencies) {
  const sorted = [...latencies].sort((a, b) => a - b);
  const at = (p) => sorted[Math.round((sorted.length - 1) * p)];
  console.log(JSON.stringify({
    system,
    version,
    settings,
    shape: `${shape} (${sorted.length} jobs)`,
    latency_ms: { p50: at(0.5), p99: at(0.99) },
  }));
}

// The flow shape: `producer` (a script path and its arguments) runs in a process of its
// own, enqueuing batches of 10 back to back, while this process's workers run; `ended`
// counts handler calls. After a 2 s warm-up the calls inside `windowSecs` make the rate;
// then the producer stops and `backlog()` counts what is still queued. Prints one JSON
// line. The machine's CPU per job includes the producer's; the process's is the workers'.
export async function flowRun(system, version, settings, producer, windowSecs, backlog) {
  const { spawn } = await import("node:child_process");
  let calls = 0;
  const child = spawn(process.execPath, producer, { stdio: ["ignore", "ignore", "inherit"] });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const measure = async () => {
    await sleep(2000);
    const c0 = calls;
    const t0 = process.hrtime.bigint();
    const cpu0 = cpu();
    await sleep(windowSecs * 1000);
    const c1 = calls;
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu1 = cpu();
    child.kill("SIGTERM");
    await exited;
    const jobs = c1 - c0;
    console.log(JSON.stringify({
      system,
      version,
      settings,
      shape: "flow (1 producer x10)",
      jobs_per_s: jobs / secs,
      backlog: await backlog(),
      cpu_per_job_us: cpuPerJob(cpu0, cpu1, jobs),
    }));
  };
  return { ended: (n = 1) => (calls += n), measure };
}

// A producer's loop: `enqueue()` (one batch of 10) back to back until SIGTERM.
export async function produceUntilStopped(enqueue) {
  let stop = false;
  process.on("SIGTERM", () => (stop = true));
  while (!stop) await enqueue();
}
