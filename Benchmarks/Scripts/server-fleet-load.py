#!/usr/bin/env python3
"""The server example's fleet load run: one counted upstream (50 ms per load) and 4 instances of
`profile-fleet serve` on one PostgreSQL, all on loopback; in each of 40 bursts, 150 ms apart,
8 concurrent clients per instance ask it for the same profile. Once coalescing across processes
(PostgresCoalescer), once per process only (InFlightTaskCoalescer). Bounded: a fixed number of
requests, a 5 s timeout per request, every process stopped at the end.

usage: COALESCING_POSTGRES_URL=postgres://… python3 Benchmarks/Scripts/server-fleet-load.py PROFILE_FLEET
"""

import concurrent.futures
import os
import subprocess
import sys
import time
import urllib.request

INSTANCES, BURSTS, CLIENTS, INTERVAL, LATENCY_MS = 4, 40, 8, 0.150, 50


def start(command):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()  # "upstream: URL" or "server: URL", once listening
    if not line:
        sys.exit(f"{command[1]} did not start")
    return process, line.split()[-1]


def get(url):
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=5) as response:
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status}")
    return (time.monotonic() - started) * 1000


def run(binary, database, per_process):
    upstream, upstream_url = start([binary, "upstream", "--latency-ms", str(LATENCY_MS)])
    table = f"server_fleet_{int(time.time())}"
    extra = ["--per-process"] if per_process else []
    servers = [start([binary, "serve", "--upstream", upstream_url, "--postgres", database, "--table", table] + extra)
               for _ in range(INSTANCES)]
    try:
        latencies = []
        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=INSTANCES * CLIENTS) as pool:
            for burst in range(BURSTS):
                due = began + burst * INTERVAL
                time.sleep(max(0, due - time.monotonic()))
                urls = [f"{url}/profiles/burst-{burst}" for _, url in servers for _ in range(CLIENTS)]
                latencies += list(pool.map(get, urls))
        elapsed = time.monotonic() - began
        with urllib.request.urlopen(f"{upstream_url}/counts", timeout=5) as response:
            loads = int(response.read())
    finally:
        for process, _ in servers + [(upstream, None)]:
            process.terminate()
            process.wait(timeout=10)
    latencies.sort()
    return {"runs": loads / BURSTS, "requests": len(latencies), "rate": len(latencies) / elapsed,
            "p50": latencies[len(latencies) // 2], "p99": latencies[int(len(latencies) * 0.99)]}


def main():
    binary, database = sys.argv[1], os.environ["COALESCING_POSTGRES_URL"]
    rows = [("across processes (PostgresCoalescer)", run(binary, database, False)),
            ("per process only (InFlightTaskCoalescer)", run(binary, database, True))]
    print(f"server fleet load run: {INSTANCES} instances x {CLIENTS} clients per burst, {BURSTS} bursts every "
          f"{int(INTERVAL * 1000)} ms, upstream {LATENCY_MS} ms, loopback HTTP and PostgreSQL")
    print("| coalescing | upstream loads per burst | requests | requests/s | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, row in rows:
        print(f"| {name} | {row['runs']:.2f} | {row['requests']} | {row['rate']:.0f} | {row['p50']:.1f} "
              f"| {row['p99']:.1f} |")
    if rows[0][1]["runs"] > 1.5:
        sys.exit(f"expected about one upstream load per burst across the fleet, got {rows[0][1]['runs']:.2f}")


if __name__ == "__main__":
    main()
