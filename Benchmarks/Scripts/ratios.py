#!/usr/bin/env python3
"""Runs the benchmark suite once and prints every figure with its ratio to its baseline.

    cd Benchmarks && python3 Scripts/ratios.py            # build, run everything, print tables
    python3 Scripts/ratios.py --csv results.influx.csv    # re-print from a saved run
    python3 Scripts/ratios.py --save results.influx.csv   # also keep the raw export

It runs `swift package benchmark` with `--format influx` (one CSV with the percentiles of every
metric), takes the medians (p50) of wall-clock time, malloc calls and (for workload 6) bytes left
allocated per iteration (and, for workload 9, the mean of the requests sent), divides them by the number of callers (or operations) each iteration
handles, and sets each figure against the baseline measured in the same run. It ends with issue
11's targets, each met or missed. Standard library only.
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

BENCHMARKS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------------------------
# What to print: (workload, label, benchmark name, baseline benchmark name or None, note).
# The divisor (callers, operations or waiters per iteration) is read from the name: the last of
# N=, K=, M=, U= if present (the last one), else 1.
# ---------------------------------------------------------------------------------------------


def rows():
    out = []
    for n in (10, 1_000, 10_000, 100_000):
        naive = f"Join/N={min(n, 10_000)}/naive"
        note = "baseline: naive at N = 10,000 (at 100,000 it crashes)" if n > 10_000 else ""
        out.append(("1 Join", f"N = {n:,}, ours enqueue(identifier:…) (cheapest)", f"Join/N={n}/ours-handler", naive, note))
        out.append(("1 Join", f"N = {n:,}, ours enqueue(operation:)", f"Join/N={n}/ours-operation", naive, note))
        if n <= 10_000:
            out.append(("1 Join", f"N = {n:,}, naive", naive, None, "baseline"))
    for p in (10, 1_000, 10_000):
        naive = f"JoinAmongPending/P={p}/N=100/naive"
        out.append(("1 Join among P pending", f"P = {p:,}, ours enqueue(identifier:…)", f"JoinAmongPending/P={p}/N=100/ours-handler", naive, ""))
        out.append(("1 Join among P pending", f"P = {p:,}, ours enqueue(operation:)", f"JoinAmongPending/P={p}/N=100/ours-operation", naive, ""))
        out.append(("1 Join among P pending", f"P = {p:,}, naive", naive, None, "baseline"))
    for layout in ("1-queue", "8-queues"):
        naive = f"FanOut/N=10000/{layout}/naive"
        text = "1 shared queue" if layout == "1-queue" else "8 queues"
        out.append(("2 Fan-out", f"{text}, ours enqueue(identifier:…)", f"FanOut/N=10000/{layout}/ours-handler", naive, ""))
        out.append(("2 Fan-out", f"{text}, ours enqueue(operation:)", f"FanOut/N=10000/{layout}/ours-operation", naive, ""))
        out.append(("2 Fan-out", f"{text}, naive", naive, None, "baseline"))
    for p in (10, 1_000, 10_000):
        naive = f"DistinctWork/P={p}/naive"
        out.append(("3 Distinct work", f"P = {p:,}, ours", f"DistinctWork/P={p}/ours-operation", naive, ""))
        out.append(("3 Distinct work", f"P = {p:,}, naive", naive, None, "baseline"))
        out.append(("3 Distinct work", f"P = {p:,}, OperationQueue.addOperation alone", f"DistinctWork/P={p}/raw-queue", None,
                    "Foundation's share of both rows above"))
    out.append(("4 Unique throughput", "through OperationQueueManager", "UniqueThroughput/M=1000/manager", "UniqueThroughput/M=1000/raw-queue", ""))
    out.append(("4 Unique throughput", "raw OperationQueue", "UniqueThroughput/M=1000/raw-queue", None, "baseline"))
    for kind, text in (("ours-inflight", "InFlightTaskCoalescer"), ("ours-prefetchable", "PrefetchableTaskCoalescer")):
        out.append(("5 Task join", text, f"TaskJoin/N=10000/{kind}", "TaskJoin/N=10000/task-dictionary", ""))
    out.append(("5 Task join", "[Key: Task] actor (seed 001)", "TaskJoin/N=10000/task-dictionary", None, "baseline"))
    out.append(("5 Cancelled waiter leaves", "InFlightTaskCoalescer", "TaskCancelledWaiterLeaves/K=1000/ours-inflight",
                "TaskCancelledWaiterLeaves/K=1000/bare-cancellable-wait",
                "the seed-001 actor cannot: its waiter stays until the work ends"))
    out.append(("5 Cancelled waiter leaves", "bare cancellable wait (floor)", "TaskCancelledWaiterLeaves/K=1000/bare-cancellable-wait", None, "baseline"))
    plain = "JoinControls/N=1000/plain"
    out.append(("7 Join controls", "enqueue(identifier:…) with an observer", "JoinControls/N=1000/observer", plain, "an observer that does nothing"))
    out.append(("7 Join controls", "enqueue(identifier:…) with a timeout", "JoinControls/N=1000/timeout", plain, "an hour off: never fires"))
    out.append(("7 Join controls", "enqueue(identifier:…), neither", plain, None, "baseline"))
    for kind, text in (("ours-inflight-observer", "with an observer"), ("ours-inflight-timeout", "with a timeout")):
        out.append(("7 Join controls", f"InFlightTaskCoalescer {text}", f"TaskJoin/N=10000/{kind}", "TaskJoin/N=10000/ours-inflight", ""))
    quiet = "Progress/N=100/U=10000/no-progress"
    out.append(("8 Progress, per update", "100 callers asking, 1 callback queue", "Progress/N=100/U=10000/ours-progress", quiet,
                "the latest wins per caller"))
    out.append(("8 Progress, per update", "100 callers, none asking", quiet, None, "baseline: the work records its latest value"))
    plain, plain_10 = "HTTP/N=1/plain-urlsession", "HTTP/N=10/plain-urlsession"
    out.append(("9 HTTP request", "CoalescingURLSession.data(for:), 1 caller", "HTTP/N=1/coalescing", plain,
                "nothing shared: the added time per caller"))
    out.append(("9 HTTP request", "InFlightTaskCoalescer over the plain request", "HTTP/N=1/task-coalescer-over-plain", plain,
                "diagnostic: the coalescer's share of the row above"))
    out.append(("9 HTTP request", "the request's key and its description alone", "HTTP/N=1/key-alone", plain,
                "diagnostic: the front-end's share before the coalescer"))
    out.append(("9 HTTP request", "plain URLSession.data(for:), 1 caller", plain, None, "baseline"))
    out.append(("9 HTTP request", "10 identical callers, CoalescingURLSession", "HTTP/N=10/coalescing", plain_10, ""))
    out.append(("9 HTTP request", "10 callers, plain URLSession", plain_10, None, "baseline"))
    return out


def divisor(name):
    found = re.findall(r"[NKMU]=(\d+)", name)
    return int(found[-1]) if found else 1


# ---------------------------------------------------------------------------------------------
# Running and parsing
# ---------------------------------------------------------------------------------------------


def run_suite(extra):
    out_dir = tempfile.mkdtemp(prefix="coalescing-benchmarks-")
    command = ["swift", "package", "--allow-writing-to-directory", out_dir, "benchmark",
               "--no-progress", "--format", "influx", "--path", out_dir] + extra
    print("$ " + " ".join(command), file=sys.stderr)
    result = subprocess.run(command, cwd=BENCHMARKS_DIR, stdout=sys.stderr, stderr=sys.stderr)
    if result.returncode != 0:
        sys.exit(f"swift package benchmark failed with status {result.returncode}")
    files = [f for f in os.listdir(out_dir) if f.endswith(".csv")]
    if not files:
        sys.exit(f"no influx export found in {out_dir}")
    return os.path.join(out_dir, files[0])


def medians(path):
    """{benchmark: {"time": ns, "mallocs": count, "iterations": n}} from the influx export."""
    figures = {}
    with open(path, newline="") as handle:
        for record in csv.reader(handle):
            if len(record) < 15 or record[0].startswith("#") or record[0] == "measurement":
                continue
            metric, test, percentile, value, iterations = (
                record[6], record[8], record[9], record[10], record[12])
            if float(percentile) != 50.0:
                continue
            entry = figures.setdefault(test, {})
            entry["iterations"] = int(iterations)
            if metric == "Time(wallclock)":
                # Raw nanoseconds, whatever display unit the `unit` column names.
                entry["time"] = float(value)
            elif metric == "Malloc(total)":
                entry["mallocs"] = float(value)
            elif metric == "requests":
                # Workload 9's custom metric: the mean over iterations of the requests the stub answered.
                entry["requests"] = float(record[11])
            elif metric == "Malloc/freeΔ(bytes)":
                # `memoryLeakedBytes`: bytes requested from malloc and not freed in the region.
                entry["bytes"] = float(value)
    return figures


# ---------------------------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------------------------


def fmt_time(ns):
    if ns is None:
        return "—"
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:,.1f} µs"
    return f"{ns:,.0f} ns" if ns >= 100 else f"{ns:,.1f} ns"


def fmt_count(count):
    if count is None:
        return "—"
    return f"{count:,.0f}" if count >= 100 else f"{count:,.2f}"


def fmt_ratio(value, base, better, worse):
    """`value ÷ base`, spelled out: "0.20× (5.0× faster)", "1.96× (1.96× slower)"."""
    if value is None or base is None or base == 0:
        return "—"
    ratio = value / base
    text = f"{ratio:.3f}×" if ratio < 0.1 else f"{ratio:.2f}×"
    if value > 0 and ratio < 0.995:
        factor = base / value
        text += f" ({factor:,.1f}× {better})" if factor < 100 else f" ({factor:,.0f}× {better})"
    elif ratio > 1.005:
        text += f" ({worse})"
    return text


def per_unit(figures, name):
    entry = figures.get(name)
    if entry is None:
        return None, None, None
    unit = divisor(name)
    time = entry.get("time")
    mallocs = entry.get("mallocs")
    return (time / unit if time is not None else None,
            mallocs / unit if mallocs is not None else None,
            entry.get("iterations"))


def print_table(figures):
    print("| Workload | Variant | per | Time (median) | Time ÷ baseline | Mallocs | Mallocs ÷ baseline | Iterations | Note |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for workload, label, name, baseline, note in rows():
        time, mallocs, iterations = per_unit(figures, name)
        if time is None:
            print(f"| {workload} | {label} | | not run | | | | | `{name}` missing |")
            continue
        base_time, base_mallocs, _ = per_unit(figures, baseline) if baseline else (None, None, None)
        unit = divisor(name)
        requests = figures[name].get("requests")
        if requests is not None and name.startswith("HTTP/N=10/"):
            note = (note + "; " if note else "") + f"requests per iteration: {requests:g} (mean)"
        per = "caller" if workload.startswith(("1", "2", "9")) else (
            "enqueue" if workload.startswith("3") else ("operation" if workload.startswith("4") else (
                "update" if workload.startswith("8") else "waiter")))
        per_text = f"{per} (÷{unit:,})" if unit > 1 else per
        print(f"| {workload} | {label} | {per_text} | {fmt_time(time)} | {fmt_ratio(time, base_time, 'faster', 'slower')} | "
              f"{fmt_count(mallocs)} | {fmt_ratio(mallocs, base_mallocs, 'fewer', 'more')} | {iterations} | {note} |")


def check(figures, description, measured_text, met):
    mark = "met" if met else "**missed**"
    print(f"| {description} | {measured_text} | {mark} |")


def print_targets(figures):
    def t(name):
        return per_unit(figures, name)[0]

    def m(name):
        return per_unit(figures, name)[1]

    print("| Target | Measured | |")
    print("|---|---|---|")
    try:
        # Join ≥ 5× faster than naive, on the cheapest path, everywhere it was measured.
        pairs = [(f"N = {n:,}", f"Join/N={n}/ours-handler", f"Join/N={min(n, 10_000)}/naive") for n in (10, 1_000, 10_000, 100_000)]
        pairs += [(f"P = {p:,}", f"JoinAmongPending/P={p}/N=100/ours-handler", f"JoinAmongPending/P={p}/N=100/naive") for p in (10, 1_000, 10_000)]
        speedups = [(t(naive) / t(ours), where) for where, ours, naive in pairs]
        worst = min(speedups)
        check(figures, "Join ≥ 5× faster than naive (cheapest path)",
              f"{worst[0]:.1f}× at {worst[1]} (best {max(speedups)[0]:,.0f}× at {max(speedups)[1]})", worst[0] >= 5)
        pairs_op = [(where, ours.replace("ours-handler", "ours-operation"), naive) for where, ours, naive in pairs]
        speedups_op = [(t(naive) / t(ours), where) for where, ours, naive in pairs_op]
        worst_op = min(speedups_op)
        check(figures, "… and with enqueue(operation:)",
              f"{worst_op[0]:.1f}× at {worst_op[1]} (best {max(speedups_op)[0]:,.0f}×)", worst_op[0] >= 5)

        for path, text in (("ours-handler", "cheapest path"), ("ours-operation", "enqueue(operation:)")):
            times = [t(f"Join/N={n}/{path}") for n in (10, 1_000, 10_000, 100_000)]
            spread = max(times) / min(times)
            check(figures, f"Join flat in N, {text} (max ÷ min over N = 10…100,000 ≤ 1.3)",
                  " / ".join(fmt_time(x) for x in times) + f" → {spread:.2f}", spread <= 1.3)
        for path, text in (("ours-handler", "cheapest path"), ("ours-operation", "enqueue(operation:)")):
            low, high = t(f"JoinAmongPending/P=10/N=100/{path}"), t(f"JoinAmongPending/P=10000/N=100/{path}")
            check(figures, f"Join flat in P, {text} (P = 10,000 ≤ 1.3× P = 10)",
                  f"{fmt_time(low)} → {fmt_time(high)}: {high / low:.2f}×", high / low <= 1.3)
        low, high = t("DistinctWork/P=10/ours-operation"), t("DistinctWork/P=10000/ours-operation")
        check(figures, "Distinct work flat in P, whole enqueue (P = 10,000 ≤ 1.3× P = 10)",
              f"{fmt_time(low)} → {fmt_time(high)}: {high / low:.2f}×", high / low <= 1.3)
        shares = [t(f"DistinctWork/P={p}/ours-operation") - t(f"DistinctWork/P={p}/raw-queue") for p in (10, 1_000, 10_000)]
        check(figures, "… the manager's share alone (ours − addOperation alone)",
              " / ".join(fmt_time(x) for x in shares) + f" at P = 10 / 1,000 / 10,000: {shares[2] / shares[0]:.2f}×",
              shares[2] / shares[0] <= 1.3)

        allocations = [(m(f"Join/N={n}/ours-handler"), n) for n in (10, 1_000, 10_000, 100_000)]
        check(figures, "≤ 1 allocation per joining caller, cheapest path",
              ", ".join(f"{a:.2f} at N = {n:,}" for a, n in allocations), max(a for a, _ in allocations) <= 1.0)

        for layout, text in (("1-queue", "one shared queue"), ("8-queues", "8 queues")):
            ours, naive = t(f"FanOut/N=10000/{layout}/ours-handler"), t(f"FanOut/N=10000/{layout}/naive")
            check(figures, f"Fan-out ≥ 10× faster than naive, {text}", f"{naive / ours:.1f}×", naive / ours >= 10)
        ours = t("FanOut/N=10000/1-queue/ours-handler")
        check(figures, "Fan-out ≤ 50 ns per caller sharing a queue", fmt_time(ours), ours <= 50)

        manager, raw = t("UniqueThroughput/M=1000/manager"), t("UniqueThroughput/M=1000/raw-queue")
        check(figures, "Manager on never-coalescing work ≤ 1.1× raw OperationQueue",
              f"{fmt_time(manager)} vs {fmt_time(raw)} per operation: {manager / raw:.2f}×", manager / raw <= 1.1)

        for kind, text in (("ours-inflight", "InFlightTaskCoalescer"), ("ours-prefetchable", "PrefetchableTaskCoalescer")):
            ours, base = t(f"TaskJoin/N=10000/{kind}"), t("TaskJoin/N=10000/task-dictionary")
            check(figures, f"{text} join no slower than the [Key: Task] actor",
                  f"{fmt_time(ours)} vs {fmt_time(base)} per waiter: {ours / base:.2f}×", ours <= base)
    except (TypeError, ZeroDivisionError) as error:
        print(f"| (some benchmarks missing: {error}) | | |")


# ---------------------------------------------------------------------------------------------
# Workload 6 (memory per joined caller) and issue 11's targets
# ---------------------------------------------------------------------------------------------

MEMORY_CALLERS = 1_000_000


def memory_per_caller(figures):
    """(total, closure, beyond) requested bytes per caller at 1,000,000 joined callers, or Nones."""
    def per_caller(kind):
        entry = figures.get(f"JoinMemory/N={MEMORY_CALLERS}/{kind}")
        if entry is None or entry.get("bytes") is None:
            return None
        return entry["bytes"] / MEMORY_CALLERS

    total, closure = per_caller("ours-handler"), per_caller("closure-alone")
    beyond = total - closure if total is not None and closure is not None else None
    return total, closure, beyond


def print_memory(figures):
    print("| Workload | Variant | per | Bytes left allocated (median) | Mallocs | Time (median) | Note |")
    print("|---|---|---|---:|---:|---:|---|")
    total, closure, beyond = memory_per_caller(figures)
    for kind, label, note in (
            ("ours-handler", "1,000,000 callers join, ours enqueue(identifier:…)", "the callers list and each caller"),
            ("closure-alone", "the same closure stored 1,000,000 times, alone",
             "the caller's closure as a generic API keeps it (its re-abstraction thunk)")):
        name = f"JoinMemory/N={MEMORY_CALLERS}/{kind}"
        entry = figures.get(name)
        if entry is None or entry.get("bytes") is None:
            print(f"| 6 Join memory | {label} | | not run | | | `{name}` missing |")
            continue
        time, mallocs, _ = per_unit(figures, name)
        print(f"| 6 Join memory | {label} | caller (÷{MEMORY_CALLERS:,}) | {entry['bytes'] / MEMORY_CALLERS:,.1f} B | "
              f"{fmt_count(mallocs)} | {fmt_time(time)} | {note} |")
    if beyond is not None:
        print(f"| 6 Join memory | the library's share (difference) | caller | {beyond:,.1f} B | | | "
              "requested bytes; glibc adds its chunk header and rounding |")


def issue_11_targets(figures):
    """[(path, measured text, target text, met)] for issue 11's table; met is None when not run."""
    def t(name):
        return per_unit(figures, name)[0]

    def m(name):
        return per_unit(figures, name)[1]

    def guarded(path, target, compute):
        try:
            measured, met = compute()
        except (TypeError, ZeroDivisionError, KeyError):
            return (path, "not run", target, None)
        return (path, measured, target, met)

    def operation_join():
        # P = 0 (the Join rows: nothing else pending) and P = 10 (JoinAmongPending).
        pairs = [(f"N = {n:,}, P = 0", f"Join/N={n}/ours-operation", f"Join/N={n}/naive") for n in (10, 1_000, 10_000)]
        pairs.append(("N = 100, P = 10", "JoinAmongPending/P=10/N=100/ours-operation", "JoinAmongPending/P=10/N=100/naive"))
        ratios = [(t(ours) / t(naive), where, t(ours), t(naive)) for where, ours, naive in pairs]
        worst = max(ratios)
        text = f"worst {worst[0]:.2f}× naive at {worst[1]} ({fmt_time(worst[2])} vs {fmt_time(worst[3])}); " + \
            ", ".join(f"{r:.2f}×" for r, *_ in ratios)
        return text, worst[0] <= 1.0

    def handler_join():
        rows = []
        for n in (10, 1_000, 10_000, 100_000):
            ours, naive = f"Join/N={n}/ours-handler", f"Join/N={min(n, 10_000)}/naive"
            rows.append((n, t(ours), t(naive) / t(ours), m(ours)))
        slowest = max(rows, key=lambda r: r[1])
        least = min(rows, key=lambda r: r[2])
        most = max(rows, key=lambda r: r[3])
        text = (f"slowest {fmt_time(slowest[1])} at N = {slowest[0]:,}; least {least[2]:.1f}× faster than naive at "
                f"N = {least[0]:,}; at most {most[3]:.2f} allocations per caller at N = {most[0]:,}")
        return text, slowest[1] <= 100 and least[2] >= 5 and most[3] <= 1.0

    def task_join(kind):
        def compute():
            ours, base = t(f"TaskJoin/N=10000/{kind}"), t("TaskJoin/N=10000/task-dictionary")
            return f"{fmt_time(ours)} vs {fmt_time(base)}: {ours / base:.2f}× the actor", ours <= base
        return compute

    def unique():
        manager, raw = t("UniqueThroughput/M=1000/manager"), t("UniqueThroughput/M=1000/raw-queue")
        return f"{fmt_time(manager)} vs {fmt_time(raw)} per operation: {manager / raw:.2f}×", manager / raw <= 1.05

    def fan_out():
        ours = t("FanOut/N=10000/1-queue/ours-handler")
        return f"{fmt_time(ours)} per caller", ours <= 40

    def memory():
        total, closure, beyond = memory_per_caller(figures)
        text = f"{beyond:,.1f} B beyond the closure ({total:,.1f} B per caller in all, {closure:,.1f} B the closure)"
        return text, beyond <= 64

    return [
        guarded("Join with `enqueue(operation:)`, P = 0…10 pending", "≤ 1.0× naive at every P", operation_join),
        guarded("Join with a handler alone (`enqueue(identifier:…)`), N = 10…100,000",
                "≤ 100 ns and ≥ 5× naive, ≤ 1 allocation per caller", handler_join),
        guarded("`InFlightTaskCoalescer` join", "≤ 1.0× the `[Key: Task]` actor", task_join("ours-inflight")),
        guarded("`PrefetchableTaskCoalescer` join", "≤ 1.0× the `[Key: Task]` actor", task_join("ours-prefetchable")),
        guarded("Work that never coalesces, through the manager", "≤ 1.05× a raw `OperationQueue`", unique),
        guarded("Fan-out to callers on one queue", "≤ 40 ns per caller", fan_out),
        guarded(f"Memory per joined caller at {MEMORY_CALLERS:,} callers, handler path",
                "≤ 64 bytes beyond the caller's closure", memory),
    ]


def print_issue_11_targets(figures):
    print("| Path | Measured | Target | |")
    print("|---|---|---|---|")
    for path, measured, target, met in issue_11_targets(figures):
        mark = "not run" if met is None else ("met" if met else "**missed**")
        print(f"| {path} | {measured} | {target} | {mark} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", help="read this influx export instead of running the suite")
    parser.add_argument("--save", help="copy the influx export of this run here")
    parser.add_argument("extra", nargs="*", help="passed to `swift package benchmark` (after --)")
    args = parser.parse_args()

    path = args.csv or run_suite(args.extra)
    if args.save and not args.csv:
        with open(path, "rb") as source, open(args.save, "wb") as target:
            target.write(source.read())
    figures = medians(path)
    print("Medians per iteration, divided per caller / enqueue / operation / waiter. "
          "Ratios: this figure ÷ its baseline's, from the same run (below 1 is better).\n")
    print_table(figures)
    print()
    print_memory(figures)
    print()
    print_targets(figures)
    print()
    print("Issue 11's targets (release build, medians, ratios from this run):\n")
    print_issue_11_targets(figures)


if __name__ == "__main__":
    main()
