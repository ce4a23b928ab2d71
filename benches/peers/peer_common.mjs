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
    cpu_per_job_us: {
      machine: ((c1.busy - c0.busy) / TICKS / jobs) * 1e6,
      process: ((c1.own - c0.own) / TICKS / jobs) * 1e6,
    },
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
