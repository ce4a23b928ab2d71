// What every Node.js peer driver shares: CPU counters and the one JSON line it prints.
import { readFileSync } from "node:fs";

const TICKS = 100; // USER_HZ

// Busy jiffies of the whole machine, and this process's user and system jiffies.
export function cpu() {
  const stat = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const busy = stat.slice(0, 8).reduce((a, b) => a + b, 0) - stat[3] - stat[4];
  const own = readFileSync("/proc/self/stat", "utf8").split(")").pop().trim().split(/\s+/);
  return { busy, own: Number(own[11]) + Number(own[12]) };
}

// Prints the driver's result in the format compare.sh reads.
export function report(system, version, settings, jobs, secs, c0, c1) {
  console.log(JSON.stringify({
    system,
    version,
    settings,
    shape: `drain ${jobs}`,
    jobs_per_s: jobs / secs,
    cpu_per_job_us: {
      machine: ((c1.busy - c0.busy) / TICKS / jobs) * 1e6,
      process: ((c1.own - c0.own) / TICKS / jobs) * 1e6,
    },
  }));
}
