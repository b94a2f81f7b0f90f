#!/usr/bin/env python3
"""What a fleet of PostgresCoalescer processes costs the app's own database (issue 38, item 7).

Every result's NOTIFY reaches every process's session, and PostgreSQL serialises the commits of
notifying transactions behind one database-wide lock. So, on one loopback PostgreSQL, beside
pgbench's TPC-B in tables of its own (a small scale, standing for the app's own writes):

- the app's writes alone, and while 4 probe processes (16 callers each, every call a new key, a
  0 ms work) coalesce at 1,000 and 5,000 values/s and as fast as they go: pgbench's transactions/s
  and its latency, as ratios against the writes alone in the same round;
- as the fleet grows (2, 4, 8, 16 processes) at 1,000 values/s: the notifications each session is
  delivered per value (one process counts what a listener of its own hears on the channel; every
  NOTIFY reaches every listener, so each session is delivered the same), the commits per value
  (pg_stat_database, pgbench's own transactions taken off), and pgbench beside it.

The rounds interleave the configurations, so that each ratio has a baseline from the same minute;
the machine's load averages (/proc/loadavg) are printed beside every figure: the machine may be
shared. Loopback only, bounded counts and times; each probe killed after a cap.

usage: COALESCING_POSTGRES_URL=postgres://… python3 Benchmarks/Scripts/postgres-capacity.py PROBE [--quick]
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

CAP_SECONDS, CALLERS = 120, 16
PGBENCH = os.environ.get("PGBENCH", "pgbench")


def psql(url, sql):
    return subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True, timeout=30).stdout.strip()


def load_average():
    with open("/proc/loadavg", encoding="utf-8") as file:
        return " ".join(file.read().split()[:3])


def commits(url):
    return int(psql(url, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))


def pgbench(url, seconds, clients):
    """Starts pgbench's TPC-B for `seconds`; returns the process, to read when it ends."""
    return subprocess.Popen([PGBENCH, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds), url],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def pgbench_result(process):
    output, _ = process.communicate(timeout=CAP_SECONDS)
    if process.returncode != 0:
        sys.exit(f"pgbench failed:\n{output}")
    tps = float(re.search(r"tps = ([0-9.]+)", output).group(1))
    latency = float(re.search(r"latency average = ([0-9.]+) ms", output).group(1))
    transactions = int(re.search(r"number of transactions actually processed: (\d+)", output).group(1))
    return {"tps": tps, "latency": latency, "transactions": transactions}


def run(probe, url, processes, rate, seconds, bench_clients):
    """One configuration: `processes` probes (none for the writes alone) at `rate` values/s in all
    (None: as fast as they go) for `seconds`, pgbench beside them over the middle of the window."""
    table = f"capacity_{int(time.time() * 1000)}"
    runs = tempfile.NamedTemporaryFile(prefix="capacity-", delete=False).name
    # Long enough for every probe to connect and say it is ready, on a busy machine.
    start = time.time() + (3 + processes * 0.25 if processes else 0)
    fleet = []
    for index in range(processes):
        arguments = [probe, "--url", url, "--table", table, "--runs-file", runs, "--continuous", str(CALLERS),
                     "--seconds", str(seconds), "--start", str(int(start * 1000))]
        if rate:
            arguments += ["--rate", str(rate / processes)]
        if index == 0:
            arguments += ["--count-notifications", "yes"]
        # Files, not pipes: a probe that does not exit is killed, and what it printed is still read.
        output = tempfile.TemporaryFile(mode="w+", prefix="capacity-probe-")
        fleet.append((subprocess.Popen(arguments, stdout=output, stderr=subprocess.STDOUT, text=True), output))
    before = commits(url)
    time.sleep(max(0.0, start - time.time()) + 1)
    load = load_average()
    bench = pgbench(url, seconds - 2, bench_clients)
    outputs, hung = [], 0
    for process, output in fleet:
        try:
            process.wait(timeout=max(1.0, start + seconds + 30 - time.time()))
        except subprocess.TimeoutExpired:
            # Seen at exit after the load (issue 38, item 3): the figures were printed before it.
            process.kill()
            process.wait()
            hung += 1
        output.seek(0)
        text = output.read()
        output.close()
        if "continuous values " not in text:
            sys.exit(f"a probe failed:\n{text[-3000:]}")
        outputs.append(text)
    result = pgbench_result(bench)
    # PostgreSQL 15 flushes a backend's counters at most once a second.
    time.sleep(1.5)
    fleet_commits = commits(url) - before - result["transactions"]
    os.unlink(runs)
    if processes:
        psql(url, f"DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_seq")
    values, elapsed, heard, unavailable = 0, 0.0, None, 0
    for output in outputs:
        for line in output.splitlines():
            words = line.split()
            if line.startswith("continuous values "):
                values += int(words[2])
                elapsed = max(elapsed, float(words[4]))
            elif line.startswith("notifications "):
                heard = int(words[1])
            elif line.startswith("statistics: "):
                unavailable += int(re.search(r"databaseUnavailable (\d+)", line).group(1))
    return {
        "tps": result["tps"], "latency": result["latency"], "values/s": values / elapsed if elapsed else 0.0,
        "delivered/value": heard * processes / values if values and heard is not None else 0.0,
        "sent/value": heard / values if values and heard is not None else 0.0,
        "commits/value": fleet_commits / values if values else 0.0, "unavailable": unavailable, "load": load,
        "hung": hung,
    }


def median(rows, key):
    return statistics.median(row[key] for row in rows)


def each(rows, key):
    return ", ".join(f"{row[key]:,.0f}" for row in rows)


def main():
    probe, url = sys.argv[1], os.environ["COALESCING_POSTGRES_URL"]
    quick = "--quick" in sys.argv
    rounds, seconds, bench_clients = (1, 6, 4) if quick else (3, 12, 4)
    print(f"capacity: loopback PostgreSQL {psql(url, 'SHOW server_version')}, {os.cpu_count()} cores, "
          f"synchronous_commit {psql(url, 'SHOW synchronous_commit')}, pgbench TPC-B with {bench_clients} clients, "
          f"{rounds} rounds of {seconds} s per figure; load averages at start {load_average()}")
    subprocess.run([PGBENCH, "-i", "-q", "-s", "2", url], check=True, capture_output=True)
    try:
        fleet_rates = [(0, None, "the app's writes alone"), (4, 1000, "4 processes at 1,000 values/s"),
                       (4, 5000, "4 processes at 5,000 values/s"), (4, None, "4 processes at their top")]
        rows = {label: [] for _, _, label in fleet_rates}
        for _ in range(rounds):
            for processes, rate, label in fleet_rates:
                rows[label].append(run(probe, url, processes, rate, seconds, bench_clients))
        baseline = median(rows["the app's writes alone"], "tps")
        print("\n| beside pgbench's TPC-B | values/s | pgbench tps (each round) | ratio | pgbench latency ms "
              "| commits per value | steps without the database | load averages |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for _, _, label in fleet_rates:
            samples = rows[label]
            print(f"| {label} | {median(samples, 'values/s'):,.0f} | {median(samples, 'tps'):,.0f} "
                  f"({each(samples, 'tps')}) "
                  f"| {median(samples, 'tps') / baseline:.2f} | {median(samples, 'latency'):.2f} "
                  f"| {median(samples, 'commits/value'):.2f} | {sum(row['unavailable'] for row in samples)} "
                  f"| {'; '.join(row['load'] for row in samples)} |")

        print(f"\nprobes killed at exit, after printing their figures: "
              f"{sum(row['hung'] for samples in rows.values() for row in samples)}")

        sizes = [2, 4, 8, 16]
        grown = {size: [] for size in sizes}
        alone = []
        for _ in range(rounds):
            alone.append(run(probe, url, 0, None, seconds, bench_clients))
            for size in sizes:
                grown[size].append(run(probe, url, size, 1000, seconds, bench_clients))
        baseline = median(alone, "tps")
        print(f"\n| 1,000 values/s from N processes | values/s | notifications sent per value "
              f"| delivered to the sessions per value | commits per value | pgbench tps (each round) | ratio "
              f"| load averages |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print(f"| none: the app's writes alone | | | | | {baseline:,.0f} ({each(alone, 'tps')}) | 1.00 "
              f"| {'; '.join(row['load'] for row in alone)} |")
        for size in sizes:
            samples = grown[size]
            print(f"| {size} | {median(samples, 'values/s'):,.0f} | {median(samples, 'sent/value'):.2f} "
                  f"| {median(samples, 'delivered/value'):.2f} | {median(samples, 'commits/value'):.2f} "
                  f"| {median(samples, 'tps'):,.0f} ({each(samples, 'tps')}) | {median(samples, 'tps') / baseline:.2f} "
                  f"| {'; '.join(row['load'] for row in samples)} |")
        print(f"\nprobes killed at exit, after printing their figures: "
              f"{sum(row['hung'] for samples in [alone] + list(grown.values()) for row in samples)}")
    finally:
        subprocess.run([PGBENCH, "-i", "-I", "d", url], capture_output=True)


if __name__ == "__main__":
    main()
