#!/usr/bin/env python3
"""What a value costs PostgreSQL (issue 44): the server's own CPU and commits per value, for a fleet
of PostgresCoalescer processes and for the floor, measured in the same run on the same server.

- PostgreSQL's CPU is read from /proc: utime + stime of the postmaster and of every live process
  whose parent it is (backends, background workers), at the start and at the end of a window, plus
  the growth of the postmaster's cutime + cstime (what its children that exited in the window used;
  a child seen at the start and gone at the end is taken off at its start value). The fleet's
  processes and pgbench share the machine's cores but are not the postmaster's children, so they
  are not counted; the fleet's own CPU (the probes' utime + stime over the same window) is reported
  apart. Divided by the values completed in the window: µs of PostgreSQL CPU per value.
- Commits per value: pg_stat_database.xact_commit over the whole run (the processes' start-up and
  shutdown included), read once every backend of the run has exited, so that each has flushed its
  counters; the script's own psql calls taken off (their count per call is measured at the start).
- The floor: pgbench, paced at the same rate (-R, a Poisson schedule), 4 clients, the extended
  protocol with unnamed statements as PostgresNIO sends them (-M extended), each value two
  statements in transactions of their own on a key of its own:
  `SELECT pg_try_advisory_lock(:k), nextval(seq)`, then `SELECT pg_notify(channel, :k::text),
  pg_advisory_unlock(:k)`; with nobody listening and with N sessions listening, each a connection
  of this script's that sends LISTEN, then only reads, counting every notification as it arrives
  (checked: each heard every value). The window is the middle of pgbench's run, its connections
  made before; values are pgbench's own log lines (-l) completed in the window. Beside it, the same
  floor sent over as many sessions as the fleet has processes (pgbench -c N, nobody listening):
  PostgreSQL's cost per statement grows with the sessions that share the rate, whatever sends
  them, and a fleet of N processes has at least N sessions.
- The fleet, unique keys: N probes (`--continuous 16`, every call a new key, work 0 ms), the rate
  split over them (--rate RATE/N), ready (connected, one value through) before a shared start; the
  window is from that start to the last probe's figures. Hot keys: N probes in `--pairs` mode, pair
  i asked by every process at start + i x 60 ms, the work 20 ms; CPU per value served (each caller)
  and per run, and a joiner's time from the work's end to its value (median, p90).

Each round interleaves the rows (the floor with nobody listening first and last, the sizes
ascending in one round and descending in the next), so each ratio to the floor has a baseline from
the same minute; the table gives medians over rounds, each round's figure in brackets. The
machine's load averages (/proc/loadavg) are printed beside every figure: the machine may be shared.
Loopback only: the server's processes must be visible in this machine's /proc. Every subprocess has
a timeout, every probe is killed after a cap.

usage: COALESCING_POSTGRES_URL=postgres://… python3 Benchmarks/Scripts/postgres-cost.py PROBE [--quick]
       --quick: one round, 2 and 8 processes, 4 s per figure (about 2 minutes), for CI
"""

import glob
import hashlib
import os
import re
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

RATE, CALLERS, PAIR_INTERVAL_MS, PAIR_WORK_MS, PAIRS_SKIPPED = 800, 16, 60, 20, 5
CAP_SECONDS, CHANNEL = 60, "cost_floor"
PGBENCH = os.environ.get("PGBENCH", "pgbench")
TICKS = os.sysconf("SC_CLK_TCK")
FLOOR_SCRIPT = f"""\\set k random(1, 1000000000000)
SELECT pg_try_advisory_lock(:k), nextval('{CHANNEL}_seq');
SELECT pg_notify('{CHANNEL}', :k::text), pg_advisory_unlock(:k);
"""


class Psql:
    """One-shot psql calls, counted: each is a session of its own whose commits the counts take off."""

    calls = 0

    def __init__(self, url):
        self.url = url

    def __call__(self, sql):
        Psql.calls += 1
        done = subprocess.run(["psql", self.url, "-X", "-v", "ON_ERROR_STOP=1", "-Atc", sql],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            sys.exit(f"psql failed on {sql!r}:\n{done.stderr}")
        return done.stdout.strip()

    def commits(self):
        """xact_commit of the database, and the call's index, to take the calls since off later."""
        value = int(self("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
        return value, Psql.calls


def load_average():
    with open("/proc/loadavg", encoding="utf-8") as file:
        return " ".join(file.read().split()[:3])


def proc_stat(pid):
    """(parent, start time, utime + stime, cutime + cstime) of a process in clock ticks; None once gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as file:
            text = file.read()
    except OSError:
        return None
    # The command name, in parentheses, may itself hold spaces and parentheses.
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


class Server:
    """The postmaster of the URL's cluster, found on this machine, and the CPU of it and its children."""

    def __init__(self, url, psql):
        data = psql("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
        try:
            with open(os.path.join(data, "postmaster.pid"), encoding="utf-8") as file:
                self.postmaster = int(file.readline())
            how = f"{data}/postmaster.pid"
        except (OSError, ValueError):
            # Not readable by this user: a backend's parent is the postmaster.
            connection = Connection(url)
            self.postmaster = proc_stat(connection.backend)[0] if proc_stat(connection.backend) else 0
            connection.close()
            how = "a backend's parent"
        try:
            with open(f"/proc/{self.postmaster}/comm", encoding="utf-8") as file:
                name = file.read().strip()
        except OSError:
            name = ""
        if not name.startswith("postgres"):
            sys.exit(f"PostgreSQL's postmaster ({how}: pid {self.postmaster}) is not a process of this machine; "
                     "this script measures a loopback server only")
        self.found = f"postmaster {self.postmaster} (from {how})"

    def children(self):
        found = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = proc_stat(entry)
                if stat and stat[0] == self.postmaster:
                    found[(int(entry), stat[1])] = stat[2]
        return found

    def sample(self):
        """The CPU ticks of the postmaster, of its live children (by pid and start time), and of those
        it reaped, read again if a child was reaped during the scan."""
        for _ in range(5):
            before = proc_stat(self.postmaster)
            live = self.children()
            after = proc_stat(self.postmaster)
            if before[3] == after[3]:
                break
        return {"wall": time.time(), "monotonic": time.monotonic(), "own": after[2], "reaped": after[3],
                "live": live}

    def backends(self):
        """Client backends (`postgres: user database host(port) …`), by pid and start time."""
        found = set()
        for pid, start in self.children():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    line = file.read().decode(errors="replace")
            except OSError:
                continue
            if re.search(r"\(\d+\)", line):
                found.add((pid, start))
        return found

    def settle(self, existing, seconds=15):
        """Waits until every client backend that was not there before has exited and flushed its counters."""
        deadline = time.monotonic() + seconds
        while self.backends() - existing and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)


def cpu_seconds(start, end):
    ticks = end["own"] - start["own"] + end["reaped"] - start["reaped"]
    for key, value in end["live"].items():
        ticks += value - start["live"].get(key, 0)
    for key, value in start["live"].items():
        if key not in end["live"]:
            # Its whole life, before the window too, is in the postmaster's reaped ticks now.
            ticks -= value
    return ticks / TICKS


class Connection:
    """PostgreSQL's protocol (version 3) over a socket: what psql cannot be, a session that listens
    and only reads, every notification as it arrives. Trust, password and md5 authentication."""

    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        user = urllib.parse.unquote(parts.username or os.environ.get("USER", "postgres"))
        database = urllib.parse.unquote(parts.path.lstrip("/")) or user
        self.socket = socket.create_connection((parts.hostname, parts.port or 5432), timeout=10)
        self.buffer, self.heard = b"", 0
        startup = struct.pack("!i", 196608) + b"".join(
            name + b"\0" + value.encode() + b"\0" for name, value in
            [(b"user", user), (b"database", database), (b"application_name", "postgres-cost-listener")]) + b"\0"
        self.socket.sendall(struct.pack("!i", len(startup) + 4) + startup)
        password = urllib.parse.unquote(parts.password or os.environ.get("PGPASSWORD", ""))
        while True:
            kind, body = self.message()
            if kind == b"R":
                code = struct.unpack("!i", body[:4])[0]
                if code == 3:
                    self.send(b"p", password.encode() + b"\0")
                elif code == 5:
                    inner = hashlib.md5((password + user).encode()).hexdigest().encode()
                    self.send(b"p", b"md5" + hashlib.md5(inner + body[4:8]).hexdigest().encode() + b"\0")
                elif code != 0:
                    sys.exit(f"the listener speaks trust, password and md5 authentication only (asked for {code})")
            elif kind == b"K":
                self.backend = struct.unpack("!i", body[:4])[0]
            elif kind == b"E":
                sys.exit(f"a listener's connection failed: {body!r}")
            elif kind == b"Z":
                return

    def send(self, kind, body):
        self.socket.sendall(kind + struct.pack("!i", len(body) + 4) + body)

    def message(self):
        """The next whole message, reading as needed."""
        while True:
            if len(self.buffer) >= 5:
                length = struct.unpack("!i", self.buffer[1:5])[0]
                if len(self.buffer) >= 1 + length:
                    kind, body = self.buffer[:1], self.buffer[5:1 + length]
                    self.buffer = self.buffer[1 + length:]
                    return kind, body
            data = self.socket.recv(65536)
            if not data:
                sys.exit("a listener's connection closed")
            self.buffer += data

    def execute(self, sql):
        self.send(b"Q", sql.encode() + b"\0")
        while True:
            kind, body = self.message()
            if kind == b"E":
                sys.exit(f"{sql!r} failed: {body!r}")
            if kind == b"Z":
                return

    def received(self, data):
        """Counts the notifications in what the socket gave, keeping a partial message for later."""
        self.buffer += data
        offset = 0
        while len(self.buffer) - offset >= 5:
            length = struct.unpack("!i", self.buffer[offset + 1:offset + 5])[0]
            if len(self.buffer) - offset < 1 + length:
                break
            if self.buffer[offset:offset + 1] == b"A":
                self.heard += 1
            offset += 1 + length
        self.buffer = self.buffer[offset:]

    def close(self):
        try:
            self.send(b"X", b"")
        except OSError:
            pass
        self.socket.close()


class Listeners:
    """N sessions listening on the floor's channel, read by one thread as notifications arrive."""

    def __init__(self, url, count):
        self.connections = [Connection(url) for _ in range(count)]
        for connection in self.connections:
            connection.execute(f"LISTEN {CHANNEL}")
            connection.socket.setblocking(False)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.read)
        self.thread.start()

    def read(self):
        selector = selectors.DefaultSelector()
        for connection in self.connections:
            selector.register(connection.socket, selectors.EVENT_READ, connection)
        while not self.stopping.is_set():
            for key, _ in selector.select(timeout=0.05):
                data = key.fileobj.recv(65536)
                if data:
                    key.data.received(data)
        selector.close()

    def close(self):
        """Stops after a last read of what is on the way; returns what each heard."""
        time.sleep(0.3)
        self.stopping.set()
        self.thread.join(timeout=10)
        for connection in self.connections:
            connection.close()
        return [connection.heard for connection in self.connections]


class Fleet:
    """N probe processes, their output in files (read while they run, and after one was killed)."""

    def __init__(self, probe, url, size, arguments):
        self.directory = tempfile.mkdtemp(prefix="postgres-cost-")
        self.table = f"cost_{int(time.time() * 1000)}"
        command = [probe, "--url", url, "--table", self.table, "--runs-file", f"{self.directory}/runs"] + arguments
        self.outputs = [f"{self.directory}/probe-{index}" for index in range(size)]
        self.processes = []
        for path in self.outputs:
            with open(path, "w", encoding="utf-8") as output:
                self.processes.append(subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT))
        self.last = [0] * size

    def texts(self):
        texts = []
        for path in self.outputs:
            with open(path, encoding="utf-8", errors="replace") as file:
                texts.append(file.read())
        return texts

    def wait_for(self, pattern, deadline):
        """Waits until every probe printed a line matching `pattern`; False at the deadline."""
        while time.time() < deadline:
            if all(re.search(pattern, text, re.MULTILINE) for text in self.texts()):
                return True
            if any(process.poll() not in (None, 0) for process in self.processes):
                return False
            time.sleep(0.02)
        return False

    def cpu(self):
        """The probes' own CPU in seconds; a probe already gone counts as its last reading."""
        for index, process in enumerate(self.processes):
            stat = proc_stat(process.pid)
            if stat:
                self.last[index] = stat[2]
        return sum(self.last) / TICKS

    def end(self, deadline):
        """Waits for every probe to exit, killing those past the deadline; returns their outputs and kills."""
        killed = 0
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                killed += 1
        texts = self.texts()
        shutil.rmtree(self.directory, ignore_errors=True)
        return texts, killed


def fail(what, texts):
    sys.exit(f"{what}:\n" + "\n---\n".join(text[-2000:] for text in texts))


def floor(url, psql, server, listening, seconds, clients=4):
    """pgbench at RATE values/s over `clients` sessions, two statements per value, with `listening`
    sessions listening."""
    existing = server.backends()
    load = load_average()
    listeners = Listeners(url, listening) if listening else None
    before, index = psql.commits()
    logs = tempfile.mkdtemp(prefix="postgres-cost-pgbench-")
    with open(f"{logs}/floor.sql", "w", encoding="utf-8") as file:
        file.write(FLOOR_SCRIPT)
    bench = subprocess.Popen([PGBENCH, "-n", "-M", "extended", "-c", str(clients), "-j", "2", "-R", str(RATE),
                              "-T", str(seconds + 3), "-f", f"{logs}/floor.sql", "-l", "--log-prefix",
                              f"{logs}/transactions", url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Its connections made and its schedule running by then.
    time.sleep(1.5)
    start = server.sample()
    time.sleep(seconds)
    end = server.sample()
    output, _ = bench.communicate(timeout=seconds + CAP_SECONDS)
    heard = listeners.close() if listeners else []
    if bench.returncode != 0:
        fail("pgbench failed", [output])
    transactions = int(re.search(r"number of transactions actually processed: (\d+)", output).group(1))
    in_window = 0
    for path in glob.glob(f"{logs}/transactions*"):
        with open(path, encoding="utf-8") as file:
            for line in file:
                words = line.split()
                # client, transaction, µs, script, completion epoch s, its µs[, schedule lag]
                if start["wall"] <= int(words[4]) + int(words[5]) / 1e6 < end["wall"]:
                    in_window += 1
    shutil.rmtree(logs, ignore_errors=True)
    server.settle(existing)
    after, now = psql.commits()
    commits = after - before - psql.per_call * (now - index)
    elapsed = end["monotonic"] - start["monotonic"]
    missed = [count for count in heard if count < transactions]
    if missed:
        sys.exit(f"a listener missed notifications: heard {heard} of {transactions}")
    return {"µs/value": cpu_seconds(start, end) * 1e6 / in_window, "commits/value": commits / transactions,
            "values/s": in_window / elapsed, "load": load, "heard": heard, "values": transactions}


def end_fleet(fleet, psql, server, existing, before, index):
    """Ends a fleet's probes and drops its table: their outputs, how many were killed, and the
    commits of the run (the script's own psql calls taken off)."""
    texts, killed = fleet.end(time.time() + CAP_SECONDS)
    server.settle(existing)
    after, now = psql.commits()
    psql(f"DROP TABLE IF EXISTS {fleet.table}; DROP SEQUENCE IF EXISTS {fleet.table}_seq")
    return texts, killed, after - before - psql.per_call * (now - index)


def fleet_unique(probe, url, psql, server, size, seconds):
    """`size` probes asking new keys at RATE values/s in all, paced, for `seconds`."""
    existing = server.backends()
    load = load_average()
    start = time.time() + 3 + 0.3 * size
    fleet = Fleet(probe, url, size, ["--continuous", str(CALLERS), "--rate", f"{RATE / size:.3f}", "--seconds",
                                     str(seconds), "--start", str(int(start * 1000)), "--work-ms", "0"])
    if not fleet.wait_for(r"^ready ", start + CAP_SECONDS):
        fail("a probe was not ready", fleet.end(time.time())[0])
    late = time.time() > start
    before, index = psql.commits()
    time.sleep(max(0.0, start - time.time()))
    begin, fleet_begin = server.sample(), fleet.cpu()
    if not fleet.wait_for(r"^continuous values ", start + seconds + CAP_SECONDS):
        fail("a probe did not finish its load", fleet.end(time.time())[0])
    end, fleet_end = server.sample(), fleet.cpu()
    texts, killed, commits = end_fleet(fleet, psql, server, existing, before, index)
    values = errors = 0
    for text in texts:
        figures = re.search(r"^continuous values (\d+) .* errors (\d+)", text, re.MULTILINE)
        values += int(figures.group(1))
        errors += int(figures.group(2))
    if errors:
        fail(f"{errors} calls failed", texts)
    elapsed = end["monotonic"] - begin["monotonic"]
    return {"µs/value": cpu_seconds(begin, end) * 1e6 / values, "commits/value": commits / values,
            "fleet µs/value": (fleet_end - fleet_begin) * 1e6 / values, "values/s": values / elapsed,
            "load": load, "killed": killed, "late": late}


def fleet_hot(probe, url, psql, server, size, seconds):
    """`size` probes asking the same key at once every PAIR_INTERVAL_MS, the work PAIR_WORK_MS."""
    existing = server.backends()
    load = load_average()
    pairs = PAIRS_SKIPPED + int(seconds * 1000 / PAIR_INTERVAL_MS)
    start = time.time() + 3 + 0.3 * size
    fleet = Fleet(probe, url, size, ["--pairs-start", str(int(start * 1000)), "--pairs", str(pairs),
                                     "--interval-ms", str(PAIR_INTERVAL_MS), "--work-ms", str(PAIR_WORK_MS)])
    before, index = psql.commits()
    # Half an interval before the first pair counted: the pair before it has ended.
    time.sleep(max(0.0, start + (PAIRS_SKIPPED - 0.5) * PAIR_INTERVAL_MS / 1000 - time.time()))
    begin, fleet_begin = server.sample(), fleet.cpu()
    if not fleet.wait_for(rf"^heard {pairs - 1} ", start + pairs * PAIR_INTERVAL_MS / 1000 + CAP_SECONDS):
        fail("a probe did not hear every pair", fleet.end(time.time())[0])
    end, fleet_end = server.sample(), fleet.cpu()
    texts, killed, commits = end_fleet(fleet, psql, server, existing, before, index)
    ends, heard = {}, []
    for text in texts:
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["end"]:
                ends.setdefault(int(words[1]), []).append(int(words[2]))
            elif words[:1] == ["heard"]:
                heard.append((int(words[1]), int(words[2]), words[3]))
    counted = [entry for entry in heard if entry[0] >= PAIRS_SKIPPED]
    runs = sum(len(times) for pair, times in ends.items() if pair >= PAIRS_SKIPPED)
    # A key run twice has no single end to time a joiner from: left out (runs per key says how often).
    joined = sorted((at - ends[pair][0]) / 1e6 for pair, at, role in counted
                    if role == "joined" and len(ends.get(pair, [])) == 1)
    cpu = cpu_seconds(begin, end)
    elapsed = end["monotonic"] - begin["monotonic"]
    return {"µs/value": cpu * 1e6 / len(counted), "µs/run": cpu * 1e6 / runs,
            "commits/value": commits / len(heard), "commits/run": commits / sum(len(t) for t in ends.values()),
            "fleet µs/value": (fleet_end - fleet_begin) * 1e6 / len(counted), "values/s": len(counted) / elapsed,
            "runs/key": runs / (pairs - PAIRS_SKIPPED), "joiner p50": percentile(joined, 0.5),
            "joiner p90": percentile(joined, 0.9), "joiners": len(joined), "load": load, "killed": killed,
            "late": False}


def percentile(values, fraction):
    return values[min(len(values) - 1, int(len(values) * fraction))] if values else float("nan")


def median(rows, key):
    return statistics.median(row[key] for row in rows)


def main():
    if len(sys.argv) < 2 or "COALESCING_POSTGRES_URL" not in os.environ:
        sys.exit(__doc__.split("usage: ")[1])
    probe, url = sys.argv[1], os.environ["COALESCING_POSTGRES_URL"]
    if urllib.parse.urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("loopback only: the server's processes are read from this machine's /proc")
    quick = "--quick" in sys.argv
    rounds, sizes, seconds = (1, [2, 8], 4) if quick else (3, [2, 4, 8, 16], 8)
    psql = Psql(url)
    server = Server(url, psql)
    psql(f"DROP SEQUENCE IF EXISTS {CHANNEL}_seq; CREATE SEQUENCE {CHANNEL}_seq")
    readings = []
    for _ in range(6):
        readings.append(psql.commits()[0])
        time.sleep(0.3)
    # The median step: an autovacuum worker's commits may land between two readings.
    psql.per_call = round(statistics.median(b - a for a, b in zip(readings, readings[1:])))
    idle = server.sample()
    time.sleep(2)
    background = cpu_seconds(idle, server.sample()) * 1000
    print(f"postgres-cost: loopback PostgreSQL {psql('SHOW server_version')}, {server.found}, {os.cpu_count()} cores, "
          f"synchronous_commit {psql('SHOW synchronous_commit')}; {RATE} values/s for {seconds} s per figure, "
          f"{rounds} round(s), sizes {', '.join(map(str, sizes))}; the server idle used {background:,.0f} ms of CPU "
          f"in 2 s (read in clock ticks of {1000 / TICKS:,.0f} ms); commits per psql call {psql.per_call}; "
          f"load averages at start {load_average()}")

    rows = {}

    def record(label, row):
        rows.setdefault(label, []).append(row)
        return row

    baselines = []
    for number in range(rounds):
        first = record("floor, nobody listening", floor(url, psql, server, 0, seconds))
        ordered = sizes if number % 2 == 0 else list(reversed(sizes))
        measured = []
        for size in ordered:
            measured.append((f"floor, {size} sessions listening", floor(url, psql, server, size, seconds)))
            measured.append((f"floor over {size} sessions", floor(url, psql, server, 0, seconds, clients=size)))
            measured.append((f"fleet, {size} processes, unique keys",
                             fleet_unique(probe, url, psql, server, size, seconds)))
            measured.append((f"fleet, {size} processes, hot keys", fleet_hot(probe, url, psql, server, size, seconds)))
        last = record("floor, nobody listening", floor(url, psql, server, 0, seconds))
        baseline = (first["µs/value"] + last["µs/value"]) / 2
        baselines.append(baseline)
        for row in (first, last):
            row["ratio"] = row["µs/value"] / baseline
        for label, row in measured:
            row["ratio"] = row["µs/value"] / baseline
            record(label, row)
    psql(f"DROP SEQUENCE {CHANNEL}_seq")

    labels = ["floor, nobody listening"] + [f"floor, {size} sessions listening" for size in sizes] + [
        f"floor over {size} sessions" for size in sizes] + [
        f"fleet, {size} processes, unique keys" for size in sizes] + [f"fleet, {size} processes, hot keys"
                                                                      for size in sizes]
    print("\n| | PostgreSQL µs per value (each run) | ratio to the floor, same round | commits per value "
          "| fleet CPU µs per value | values/s | values/s per PostgreSQL core | PostgreSQL µs / commits per run "
          "| joiner ms after the work's end, p50 / p90 | load averages |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label in labels:
        samples = rows[label]
        cost = median(samples, "µs/value")
        fleet = f"{median(samples, 'fleet µs/value'):,.0f}" if "fleet µs/value" in samples[0] else ""
        per_run = (f"{median(samples, 'µs/run'):,.0f} / {median(samples, 'commits/run'):.1f}"
                   if "µs/run" in samples[0] else "")
        joiner = (f"{median(samples, 'joiner p50'):.2f} / {median(samples, 'joiner p90'):.2f}"
                  if "joiner p50" in samples[0] else "")
        each = ", ".join(f"{row['µs/value']:,.0f}" for row in samples)
        print(f"| {label} | {cost:,.0f} ({each}) "
              f"| {median(samples, 'ratio'):.2f} | {median(samples, 'commits/value'):.2f} | {fleet} "
              f"| {median(samples, 'values/s'):,.0f} | {1e6 / cost:,.0f} | {per_run} | {joiner} "
              f"| {'; '.join(row['load'] for row in samples)} |")

    unique = {size: median(rows[f"fleet, {size} processes, unique keys"], "µs/value") for size in sizes}
    hot = {size: median(rows[f"fleet, {size} processes, hot keys"], "µs/value") for size in sizes}
    floor_cost = statistics.median(baselines)
    print(f"\ncapacity, one core of this PostgreSQL: the floor {1e6 / floor_cost:,.0f} values/s; unique keys "
          + ", ".join(f"{1e6 / unique[size]:,.0f} from {size}" for size in sizes)
          + " processes; hot keys (per caller served) " + ", ".join(f"{1e6 / hot[size]:,.0f} from {size}"
                                                                     for size in sizes) + " processes")
    smallest, largest = sizes[0], sizes[-1]
    print(f"growth, unique keys: {unique[largest] / unique[smallest]:.2f}x the cost per value from {largest} "
          f"processes as from {smallest}")
    spread = {size: median(rows[f"floor over {size} sessions"], "µs/value") for size in sizes}
    print("unique keys against the floor over as many sessions: " + ", ".join(
        f"{unique[size] / spread[size]:.2f}x from {size}" for size in sizes) + f"; that floor grows "
        f"{spread[largest] / spread[smallest]:.2f}x from {smallest} sessions to {largest}")
    # Per doubling of the fleet, fitted through every size (least squares on log2 of the size).
    doublings = [size.bit_length() - 1 for size in sizes]
    slope = statistics.linear_regression(doublings, [unique[size] for size in sizes]).slope
    at64 = unique[largest] + slope * (6 - doublings[-1])
    print(f"a fleet of 64 processes, unique keys (+{slope:,.0f} µs per doubling, extrapolated from {largest}): "
          f"{at64:,.0f} µs per value, {1e6 / at64:,.0f} values/s per core; {RATE} values/s need "
          f"{at64 * RATE / 1e6:.2f} cores of PostgreSQL")
    print("hot keys: runs per key " + ", ".join(
        f"{median(rows[f'fleet, {size} processes, hot keys'], 'runs/key'):.2f} from {size}" for size in sizes)
        + " processes; joiners timed " + ", ".join(
        f"{sum(row['joiners'] for row in rows[f'fleet, {size} processes, hot keys'])} from {size}" for size in sizes))
    hung = sum(row.get("killed", 0) for samples in rows.values() for row in samples)
    late = sum(1 for samples in rows.values() for row in samples if row.get("late"))
    heard = [row["heard"] for label in labels if label.startswith("floor") for row in rows[label] if row["heard"]]
    print(f"every listener of the floor heard every value ({sum(map(len, heard))} sessions); probes killed at exit: "
          f"{hung}; fleets ready after their start: {late}; load averages at the end {load_average()}")


if __name__ == "__main__":
    main()
