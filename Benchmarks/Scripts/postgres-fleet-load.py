#!/usr/bin/env python3
"""The fleet load run: 4 processes on one PostgreSQL and one counted upstream, under bounded
bursts of identical requests, once coalescing across processes (PostgresCoalescer) and once per
process only (InFlightTaskCoalescer), and the table of what the upstream saw and what callers waited.

Each process is `coalescing-postgres-probe` in its load mode: burst b starts at the same wall-clock
instant in every process, with CALLERS concurrent requests for the key `burst-<b>`; the work appends
a line to one runs file (the counted upstream) and answers after WORK_MS. Loopback only, a fixed
number of requests, each process killed after a time cap.

usage: COALESCING_POSTGRES_URL=postgres://… python3 Benchmarks/Scripts/postgres-fleet-load.py PROBE
"""

import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROCESSES, BURSTS, CALLERS, INTERVAL_MS, WORK_MS, CAP_SECONDS = 4, 40, 8, 150, 50, 120


def run(probe, url, per_process):
    runs = tempfile.NamedTemporaryFile(prefix="fleet-runs-", delete=False).name
    start = int(time.time() * 1000) + 1500  # every process started and connected by then
    table = f"fleet_{int(time.time())}_{'local' if per_process else 'pg'}"
    command = [probe, "--url", url, "--table", table, "--runs-file", runs, "--load-start", str(start),
               "--bursts", str(BURSTS), "--callers", str(CALLERS), "--interval-ms", str(INTERVAL_MS),
               "--work-ms", str(WORK_MS)] + (["--per-process", "yes"] if per_process else [])
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    requests = []
    for process in processes:
        output, _ = process.communicate(timeout=CAP_SECONDS)
        if process.returncode != 0:
            sys.exit(f"a fleet process failed:\n{output}")
        requests += [line.split()[1:] for line in output.splitlines() if line.startswith("request ")]
    elapsed = (time.time() * 1000 - start) / 1000
    with open(runs, encoding="utf-8") as file:
        per_burst = collections.Counter(line.split()[1] for line in file if line.strip())
    os.unlink(runs)
    latencies = sorted(float(latency) for _, latency, _ in requests)
    joined = [float(latency) for _, latency, role in requests if role == "joined"]
    led = [float(latency) for _, latency, role in requests if role == "led"]
    return {
        "runs": statistics.mean(per_burst[f"burst-{b}"] for b in range(BURSTS)),
        "requests": len(requests),
        "rate": len(requests) / elapsed,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "led": statistics.median(led) if led else float("nan"),
        "joined": statistics.median(joined) if joined else float("nan"),
    }


def main():
    probe, url = sys.argv[1], os.environ["COALESCING_POSTGRES_URL"]
    rows = [("across processes (PostgresCoalescer)", run(probe, url, False)),
            ("per process only (InFlightTaskCoalescer)", run(probe, url, True))]
    print(f"fleet load run: {PROCESSES} processes x {CALLERS} callers per burst, {BURSTS} bursts every "
          f"{INTERVAL_MS} ms, work {WORK_MS} ms, loopback PostgreSQL")
    print("| coalescing | upstream runs per burst | requests | requests/s | p50 ms | p99 ms "
          "| median ms, process that ran it | median ms, process that joined |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, row in rows:
        joined = "none joined" if row["joined"] != row["joined"] else f"{row['joined']:.1f}"  # NaN: no joiner
        print(f"| {name} | {row['runs']:.2f} | {row['requests']} | {row['rate']:.0f} | {row['p50']:.1f} "
              f"| {row['p99']:.1f} | {row['led']:.1f} | {joined} |")
    across = rows[0][1]
    print(f"joining another instance's work adds {across['joined'] - across['led']:.1f} ms at the median "
          f"(the database round trips and the lock hand-over)")
    if not 0.99 <= across["runs"] <= 1.1:
        sys.exit(f"expected about one upstream run per burst across processes, got {across['runs']:.2f}")


if __name__ == "__main__":
    main()
