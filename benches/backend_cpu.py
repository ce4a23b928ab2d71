#!/usr/bin/env python3
"""PostgreSQL's CPU per job, by backend role, while a benchmark runs.

The machine's CPU per job, which `throughput` prints, counts everything the machine ran,
other services included; on a two-core machine shared with a message broker and the rest,
it wanders by a fifth between runs. This reads each backend's own CPU time from /proc
instead, so it needs the server on this machine and read access to its processes' stat
files (root, or the server's user).

Run a benchmark binary under it, with the benchmark's settings in the environment:

    cargo bench --bench throughput --no-run   # prints the binary's path
    PGQ_BENCH_SHAPES=drain PGQ_BENCH_DRAIN_THREADS=128 PGQ_BENCH_DRAIN_JOBS=100000 \
        python3 benches/backend_cpu.py target/release/deps/throughput-<hash> 100000

Every 20 ms it lists the benchmark database's backends (`pg_stat_activity`, through
`psql` with the libpq environment: PGHOST, PGPORT, PGUSER) and reads their CPU ticks; when
the benchmark exits it prints, per role (the statement a backend showed most often: the
claim starts `WITH available`, the careful completion `WITH job_status`, the plain one
`WITH deleted`, the benchmark's own enqueue `WITH input`), the ticks used and the
microseconds per job for the job count given.
A backend is timed from the first time it is seen, so give the benchmark a job count that
takes a few seconds (a tick is 10 ms).
"""

import collections
import os
import subprocess
import sys
import tempfile
import time


def ticks(pid):
    """utime + stime of `pid`, in clock ticks, or None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def backends():
    """(pid, role) of every client backend of a benchmark database."""
    out = subprocess.run(
        ["psql", "-d", "postgres", "-AtF|", "-c",
         "SELECT pid, left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 24) "
         "FROM pg_stat_activity WHERE datname LIKE 'pgqbench%' "
         "AND backend_type = 'client backend'"],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        pid, role = line.split("|", 1)
        yield int(pid), role


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: backend_cpu.py <benchmark binary> <jobs>")
    binary, jobs = sys.argv[1], int(sys.argv[2])
    # A file, not a pipe: the benchmark's progress lines must never block it.
    output = tempfile.TemporaryFile(mode="w+")
    bench = subprocess.Popen([binary], stdout=subprocess.DEVNULL, stderr=output, text=True)
    first, last = {}, {}
    roles = collections.defaultdict(collections.Counter)
    while bench.poll() is None:
        for pid, role in backends():
            roles[pid][role] += 1
        for pid in roles:
            now = ticks(pid)
            if now is not None:
                first.setdefault(pid, now)
                last[pid] = now
        time.sleep(0.02)
    output.seek(0)
    for line in output.read().splitlines():
        if "jobs/s" in line:
            print(line.strip())
    per_role = collections.Counter()
    for pid, seen in first.items():
        per_role[roles[pid].most_common(1)[0][0]] += last[pid] - seen
    hz = os.sysconf("SC_CLK_TCK")
    for role, used in per_role.most_common():
        if used > 0:
            print(f"{used:6d} ticks {used * 1e6 / hz / jobs:7.1f} us/job  {role}")


if __name__ == "__main__":
    main()
