"""What every Python peer driver shares: preparing the database, the drain's clock (wall
time and CPU counters) and the one JSON line it prints."""

import json
import os
import time

import psycopg

TICKS = os.sysconf("SC_CLK_TCK")


def run_sql(dsn: str, statement: str) -> None:
    """Runs one statement outside a transaction (CHECKPOINT, VACUUM ANALYZE)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(statement)


def _machine_busy() -> int:
    """Busy jiffies of the whole machine (user through steal, without idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4]


def _own_cpu() -> float:
    """This process's user and system CPU seconds."""
    t = os.times()
    return t.user + t.system


class Clock:
    """Started when made; `stop()` returns what `report` prints."""

    def __init__(self) -> None:
        self.t0, self.m0, self.p0 = time.perf_counter(), _machine_busy(), _own_cpu()

    def stop(self) -> dict:
        return {
            "secs": time.perf_counter() - self.t0,
            "machine_ticks": _machine_busy() - self.m0,
            "own_seconds": _own_cpu() - self.p0,
        }


def report(system: str, version: str, settings: dict, jobs: int, measured: dict) -> None:
    """Prints the driver's result in the format compare.sh reads."""
    print(
        json.dumps(
            {
                "system": system,
                "version": version,
                "settings": settings,
                "shape": f"drain {jobs}",
                "jobs_per_s": jobs / measured["secs"],
                "cpu_per_job_us": {
                    "machine": measured["machine_ticks"] / TICKS / jobs * 1e6,
                    "process": measured["own_seconds"] / jobs * 1e6,
                },
            }
        )
    )
