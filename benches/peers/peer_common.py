"""What every Python peer driver shares: CPU counters and the one JSON line it prints."""

import json
import os

TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy() -> int:
    """Busy jiffies of the whole machine (user through steal, without idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4]


def own_cpu() -> float:
    """This process's user and system CPU seconds."""
    t = os.times()
    return t.user + t.system


def report(system, version, settings, jobs, secs, machine_ticks, own_seconds):
    """Prints the driver's result in the format compare.sh reads."""
    print(
        json.dumps(
            {
                "system": system,
                "version": version,
                "settings": settings,
                "shape": f"drain {jobs}",
                "jobs_per_s": jobs / secs,
                "cpu_per_job_us": {
                    "machine": machine_ticks / TICKS / jobs * 1e6,
                    "process": own_seconds / jobs * 1e6,
                },
            }
        )
    )
