#!/usr/bin/env python3
"""The fleet benchmark of PostgresCoalescer (issue 33): 4 processes on one loopback PostgreSQL with
its default max_connections, each `coalescing-postgres-probe` from a release build.

- the 256-key burst: 4 processes ask the same 256 distinct keys at one instant (work 100 ms, then
  1 s): runs of the work, callers answered, refusals, and the connections each process held at peak
  (sampled from pg_stat_activity every 10 ms by the probes' application_name);
- a lone caller's added time: 500 calls one after another, each of a new key, with a 0 ms work,
  beside the floor measured in the same process right after: a round trip (`SELECT 1`) and a commit
  (an autocommit INSERT) on an open connection;
- a caller of another process: 200 pairs, each asked by all 4 processes at one instant, the work
  20 ms; the time from the work's end in the process that ran it to the value in each other one;
- unique keys: 4 processes x 16 callers, each asking new keys as fast as it can for 5 s.

Loopback only, bounded counts and times; each probe killed after a cap.

usage: COALESCING_POSTGRES_URL=postgres://… python3 Benchmarks/Scripts/postgres-fleet-bench.py PROBE [--quick]
"""

import collections
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROCESSES, CAP_SECONDS = 4, 180


def psql(url, sql):
    return subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True, timeout=30).stdout


def fleet(probe, url, arguments, sample_connections=False):
    runs = tempfile.NamedTemporaryFile(prefix="fleet-bench-", delete=False).name
    table = f"bench_{int(time.time() * 1000)}"
    command = [probe, "--url", url, "--table", table, "--runs-file", runs] + arguments
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for _ in range(PROCESSES)]
    peak, done = collections.Counter(), threading.Event()

    def sample():
        while not done.is_set():
            for line in psql(url, "SELECT application_name, count(*) FROM pg_stat_activity "
                                  "WHERE application_name LIKE 'probe-%' GROUP BY 1").splitlines():
                name, count = line.split("|")
                peak[name] = max(peak[name], int(count))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample) if sample_connections else None
    if sampler:
        sampler.start()
    outputs = []
    for process in processes:
        output, _ = process.communicate(timeout=CAP_SECONDS)
        if process.returncode != 0:
            sys.exit(f"a fleet process failed:\n{output}")
        outputs.append(output.splitlines())
    done.set()
    if sampler:
        sampler.join()
    with open(runs, encoding="utf-8") as file:
        run_keys = [line.split()[1] for line in file if line.strip()]
    os.unlink(runs)
    psql(url, f"DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_seq")
    return outputs, run_keys, peak


def start_in(seconds):
    return str(int((time.time() + seconds) * 1000))


def median(values):
    return statistics.median(values) if values else float("nan")


def burst(probe, url, keys, work_ms):
    outputs, run_keys, peak = fleet(
        probe, url, ["--keys-start", start_in(2.5), "--keys", str(keys), "--work-ms", str(work_ms)], True)
    requests = [line.split() for output in outputs for line in output if line.startswith("request ")]
    per_key = collections.Counter(run_keys)
    refused = sum(1 for output in outputs for line in output if "too many clients" in line or "53300" in line)
    latencies = sorted(float(request[2]) for request in requests)
    return {
        "runs": len(run_keys), "keys run twice or more": sum(1 for count in per_key.values() if count > 1),
        "answered": sum(1 for request in requests if request[3] == "ok"), "callers": PROCESSES * keys,
        "refused": refused, "peak": sorted(peak.values()),
        "p50": latencies[len(latencies) // 2], "max": latencies[-1],
    }


def lone(probe, url, count):
    outputs, _, _ = fleet_single(probe, url, ["--lone", str(count), "--work-ms", "0"])
    values = collections.defaultdict(list)
    for line in outputs:
        kind, _, value = line.partition(" ")
        if kind in ("lone", "roundtrip", "commit", "notify"):
            values[kind].append(float(value))
    return {kind: median(samples) for kind, samples in values.items()}


def fleet_single(probe, url, arguments):
    runs = tempfile.NamedTemporaryFile(prefix="fleet-bench-", delete=False).name
    table = f"bench_{int(time.time() * 1000)}"
    output = subprocess.run([probe, "--url", url, "--table", table, "--runs-file", runs] + arguments,
                            capture_output=True, text=True, timeout=CAP_SECONDS)
    os.unlink(runs)
    if output.returncode != 0:
        sys.exit(f"the probe failed:\n{output.stdout}{output.stderr}")
    psql(url, f"DROP TABLE IF EXISTS {table}; DROP SEQUENCE IF EXISTS {table}_seq")
    return output.stdout.splitlines(), None, None


def pairs(probe, url, count):
    outputs, _, _ = fleet(probe, url, ["--pairs-start", start_in(2.5), "--pairs", str(count),
                                       "--interval-ms", "60", "--work-ms", "20"])
    ends, heard = {}, []
    for output in outputs:
        for line in output:
            words = line.split()
            if words[:1] == ["end"]:
                ends[words[1]] = int(words[2])
            elif words[:1] == ["heard"] and words[3] == "joined":
                heard.append((words[1], int(words[2])))
    return median([(at - ends[pair]) / 1e6 for pair, at in heard if pair in ends]), len(heard)


def throughput(probe, url, seconds, callers):
    outputs, _, _ = fleet(probe, url, ["--throughput-seconds", str(seconds), "--callers", str(callers)])
    total, longest = 0, 0.0
    for output in outputs:
        for line in output:
            if line.startswith("throughput "):
                _, values, elapsed = line.split()
                total += int(values)
                longest = max(longest, float(elapsed))
    return total / longest


def main():
    probe, url = sys.argv[1], os.environ["COALESCING_POSTGRES_URL"]
    quick = "--quick" in sys.argv
    print(f"fleet benchmark: {PROCESSES} processes, loopback PostgreSQL "
          f"{psql(url, 'SHOW server_version').strip()}, max_connections {psql(url, 'SHOW max_connections').strip()}")
    print("\n| 256 keys at once | runs | keys run twice or more | callers answered | refused "
          "| connections per process at peak | p50 ms | max ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    failures = []
    for work_ms in ([100] if quick else [100, 1000]):
        row = burst(probe, url, 256, work_ms)
        print(f"| work {work_ms} ms | {row['runs']} | {row['keys run twice or more']} | {row['answered']} of "
              f"{row['callers']} | {row['refused']} | {', '.join(map(str, row['peak']))} | {row['p50']:.1f} "
              f"| {row['max']:.1f} |")
        if row["runs"] != 256 or row["answered"] != row["callers"] or row["refused"]:
            failures.append(f"the 256-key burst with a {work_ms} ms work: {row}")
    floor = lone(probe, url, 200 if quick else 500)
    joined, joiners = pairs(probe, url, 60 if quick else 200)
    rate = throughput(probe, url, 2 if quick else 5, 16)
    print("\n| 0 ms work | median | floor in the same run |")
    print("| --- | --- | --- |")
    print(f"| a lone caller's added time | {floor['lone']:.3f} ms | round trip {floor['roundtrip']:.3f} ms, "
          f"commit {floor['commit']:.3f} ms |")
    print(f"| a caller of another process, after the work ends ({joiners} callers) | {joined:.3f} ms "
          f"| round trip {floor['roundtrip']:.3f} ms, pg_notify in its own transaction {floor['notify']:.3f} ms |")
    print(f"| unique keys, {PROCESSES} processes x 16 callers | {rate:.0f} values/s | |")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
