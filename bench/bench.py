#!/usr/bin/env python3
"""Benchmarks snowflake_id side by side with the alternatives, in one run.

Starts a throwaway server of the given installation (snowflake_id installed and
preloaded) and measures, interleaved in rounds so that drift of the machine hits
every generator alike:

1. one session: the time per ID of each generator over many rows, against
   clock_timestamp(), the cost of calling any trivial C function per row;
2. concurrency: pgbench with 1, 2, 4 and 8 clients, batches of IDs and one ID per
   statement: IDs per second and p99 latency;
3. inserts of many rows into a table keyed by each generator: time and sizes.

Writes a markdown report, a JSON file and an SVG chart. Reports ratios; asserts
nothing about time.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chart  # noqa: E402

INSTAGRAM_STYLE = """
CREATE SEQUENCE insta_seq;
-- Instagram's published PL/pgSQL generator (2012), as applications copy it.
CREATE FUNCTION insta_next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta_seq') % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE plpgsql;
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def as_postgres(cmd):
    return ["sudo", "-n", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd


class Server:
    def __init__(self, pg_config, settings, env=()):
        self.bindir = run([pg_config, "--bindir"]).stdout.strip()
        self.version = run([pg_config, "--version"]).stdout.strip()
        self.major = int(re.search(r"(\d+)", self.version.split()[-1]).group(1))
        self.dir = tempfile.mkdtemp(prefix="sfbench.", dir="/tmp")
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0:
            run(["chown", "postgres:postgres", self.dir])
        self.data = os.path.join(self.dir, "data")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        run(as_postgres([f"{self.bindir}/initdb", "-D", self.data, "--auth=trust", "--username=postgres",
                         "--no-sync", "--locale=C", "--encoding=UTF8"]))
        conf = "\n".join([
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.dir}'",
            "shared_preload_libraries = 'snowflake_id'",
            "snowflake_id.datacenter_id = 0",
            "snowflake_id.worker_id = 0",
            "shared_buffers = '512MB'",
            "max_wal_size = '4GB'",
            "max_connections = 50",
            "autovacuum = off",  # no background work between measurements
            "jit = off",
            *settings,
        ]) + "\n"
        subprocess.run(as_postgres(["tee", "-a", f"{self.data}/postgresql.conf"]), input=conf, text=True,
                       check=True, stdout=subprocess.DEVNULL)
        # env: VAR=value for the server's processes (bench/dashboard.py's libfaketime).
        run(as_postgres(["env", *env, f"{self.bindir}/pg_ctl", "start", "-w", "-D", self.data,
                         "-l", f"{self.dir}/server.log"]))

    def psql(self, script, db="postgres"):
        cmd = as_postgres([f"{self.bindir}/psql", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                           "-d", db, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        return subprocess.run(cmd, input=script, text=True, check=True, capture_output=True).stdout

    def timings(self, queries, db="postgres"):
        """Runs the queries in one session and returns each one's time in ms."""
        out = self.psql("\\timing on\n" + "".join(q.rstrip(";") + ";\n" for q in queries), db)
        times = [float(t) for t in re.findall(r"^Time: ([0-9.]+) ms", out, re.M)]
        assert len(times) == len(queries), out
        return times

    def pgbench(self, script, clients, seconds):
        with tempfile.NamedTemporaryFile("w", suffix=".sql", dir=self.dir, delete=False) as f:
            f.write(script + "\n")
        os.chmod(f.name, 0o644)
        logdir = tempfile.mkdtemp(dir=self.dir)
        os.chmod(logdir, 0o777)
        prefix = os.path.join(logdir, "tx")
        cmd = as_postgres([f"{self.bindir}/pgbench", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                           "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
                           "-T", str(seconds), "-f", f.name, "--log", f"--log-prefix={prefix}", "postgres"])
        out = subprocess.run(cmd, text=True, check=True, capture_output=True).stdout
        tps = float(re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out).group(1))
        latencies = []
        for log in glob.glob(prefix + "*"):
            with open(log) as lf:
                latencies.extend(int(line.split()[2]) for line in lf if line.strip())
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99)] / 1000.0 if latencies else float("nan")
        return tps, p99

    def pgbench_builtin(self, args, clients, seconds, db="postgres"):
        """A built-in pgbench script (args such as ["-S", "-M", "simple"]): transactions per second
        (with -C, a connection per transaction, their connection times included)."""
        out = run(as_postgres([f"{self.bindir}/pgbench", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                               "-n", *args, "-c", str(clients), "-T", str(seconds), db])).stdout
        return float(re.search(r"tps = ([0-9.]+) \((?:without initial connection time|including reconnection times)\)",
                               out).group(1))

    def stop(self):
        subprocess.run(as_postgres([f"{self.bindir}/pg_ctl", "stop", "-w", "-m", "fast", "-D", self.data]),
                       capture_output=True)
        subprocess.run(["rm", "-rf", self.dir])


def median(xs):
    return statistics.median(xs)


def one_session(server, n, rounds, rng):
    gens = {
        "clock_timestamp() (floor)": f"SELECT count(clock_timestamp()) FROM generate_series(1, {n})",
        "snowflake_next_id()": f"SELECT count(snowflake_next_id()) FROM generate_series(1, {n})",
        "snowflake_next_ids(n)": f"SELECT count(*) FROM snowflake_next_ids({n})",
        "nextval()": f"SELECT count(nextval('bench_seq')) FROM generate_series(1, {n})",
        "gen_random_uuid()": f"SELECT count(gen_random_uuid()) FROM generate_series(1, {n})",
        "PL/pgSQL snowflake": f"SELECT count(insta_next_id()) FROM generate_series(1, {n})",
    }
    if server.major >= 18:
        gens["uuidv7()"] = f"SELECT count(uuidv7()) FROM generate_series(1, {n})"
    names = list(gens)
    server.timings([gens[k] for k in names])  # warm up caches and the plan cache
    samples = {k: [] for k in names}
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for name, ms in zip(order, server.timings([gens[k] for k in order])):
            samples[name].append(ms)
    return {k: {"ms": median(v), "ns_per_id": median(v) * 1e6 / n, "samples": v} for k, v in samples.items()}


def concurrency(server, clients_list, seconds, rounds, batch, rng):
    runs = {
        ("batch", "snowflake_next_ids(n)"): f"SELECT count(*) FROM snowflake_next_ids({batch});",
        ("batch", "snowflake_next_id()"): f"SELECT count(snowflake_next_id()) FROM generate_series(1, {batch});",
        ("batch", "nextval()"): f"SELECT count(nextval('bench_seq')) FROM generate_series(1, {batch});",
        ("batch", "gen_random_uuid()"): f"SELECT count(gen_random_uuid()) FROM generate_series(1, {batch});",
        ("single", "snowflake_next_id()"): "SELECT snowflake_next_id();",
        ("single", "nextval()"): "SELECT nextval('bench_seq');",
        ("single", "gen_random_uuid()"): "SELECT gen_random_uuid();",
    }
    if server.major >= 18:
        runs[("batch", "uuidv7()")] = f"SELECT count(uuidv7()) FROM generate_series(1, {batch});"
        runs[("single", "uuidv7()")] = "SELECT uuidv7();"
    keys = [(mode, gen, c) for (mode, gen) in runs for c in clients_list]
    samples = {k: [] for k in keys}
    for _ in range(rounds):
        order = keys[:]
        rng.shuffle(order)
        for mode, gen, c in order:
            tps, p99 = server.pgbench(runs[(mode, gen)], c, seconds)
            per_tx = batch if mode == "batch" else 1
            samples[(mode, gen, c)].append((tps * per_tx, p99))
    result = {}
    for (mode, gen, c), v in samples.items():
        result.setdefault(mode, {}).setdefault(gen, {})[c] = {
            "ids_per_s": median([x[0] for x in v]),
            "p99_ms": median([x[1] for x in v]),
        }
    return result


def inserts(server, rows, rounds, rng):
    tables = {
        "bigserial": "id bigserial PRIMARY KEY",
        "snowflake_next_id()": "id bigint PRIMARY KEY DEFAULT snowflake_next_id()",
        "gen_random_uuid()": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    }
    if server.major >= 18:
        tables["uuidv7()"] = "id uuid PRIMARY KEY DEFAULT uuidv7()"
    samples = {k: [] for k in tables}
    sizes = {}
    for _ in range(rounds):
        order = list(tables)
        rng.shuffle(order)
        for name in order:
            server.psql(f"DROP TABLE IF EXISTS ins; CREATE TABLE ins ({tables[name]}, v int); CHECKPOINT;")
            (ms,) = server.timings([f"INSERT INTO ins (v) SELECT g FROM generate_series(1, {rows}) g"])
            samples[name].append(ms)
            out = server.psql("SELECT pg_relation_size('ins'), pg_indexes_size('ins');")
            table, index = (int(x) for x in out.split("|"))
            sizes[name] = {"table_bytes": table, "index_bytes": index}
    return {k: {"ms": median(v), "samples": v, **sizes[k]} for k, v in samples.items()}


def report(meta, single, conc, ins):
    floor = single["clock_timestamp() (floor)"]["ns_per_id"]
    nextval = single["nextval()"]["ns_per_id"]
    lines = [
        f"## {meta['server']}",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['cores']} cores. One run; every number below comes from it, "
        f"generators interleaved in {meta['rounds']} rounds (medians).",
        "",
        f"### One session, {meta['n']:,} IDs per query",
        "",
        "| generator | ms per query | ns per ID | × clock_timestamp() | speed vs nextval() |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in single.items():
        lines.append(f"| {name} | {r['ms']:.1f} | {r['ns_per_id']:.1f} | {r['ns_per_id'] / floor:.2f} | "
                     f"{nextval / r['ns_per_id']:.2f}× |")
    clients = meta["clients"]
    for mode, title in (("batch", f"batches of {meta['batch']:,} IDs per statement"), ("single", "one ID per statement")):
        lines += ["", f"### Concurrency, {title}: IDs per second (pgbench, {meta['seconds']} s per run)", "",
                  "| generator | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in clients)
                  + " | p99 latency at 4 clients |",
                  "|---|" + "---:|" * (len(clients) + 1)]
        for gen, by_c in conc[mode].items():
            cells = " | ".join(f"{by_c[c]['ids_per_s']:,.0f}" for c in clients)
            p99 = by_c.get(4, by_c[clients[-1]])["p99_ms"]
            lines.append(f"| {gen} | {cells} | {p99:.2f} ms |")
    base = ins["bigserial"]
    lines += ["", f"### Inserts of {meta['rows']:,} rows, key from the column default", "",
              "| key | ms | time vs bigserial | table MB | index MB | index vs bigserial |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, r in ins.items():
        lines.append(f"| {name} | {r['ms']:.0f} | {r['ms'] / base['ms']:.3f} | {r['table_bytes'] / 2**20:.1f} | "
                     f"{r['index_bytes'] / 2**20:.1f} | {r['index_bytes'] / base['index_bytes']:.3f} |")
    return "\n".join(lines) + "\n", targets(meta, single, conc, ins)


def targets(meta, single, conc, ins):
    """The ratios issue 4 asks for, as measured in this run."""
    s = single
    floor = s["clock_timestamp() (floor)"]["ns_per_id"]
    one = s["snowflake_next_id()"]["ns_per_id"]
    ceiling = meta["ceiling_ids_per_s"]
    b4 = conc["batch"]["snowflake_next_ids(n)"][4]["ids_per_s"] if 4 in meta["clients"] else float("nan")
    n4 = conc["batch"]["nextval()"][4]["ids_per_s"] if 4 in meta["clients"] else float("nan")
    rates = [conc["batch"]["snowflake_next_ids(n)"][c]["ids_per_s"] for c in meta["clients"]]
    rows = [
        ("snowflake_next_id() per ID vs clock_timestamp()", one / floor, "≤ 1.2", one / floor <= 1.2),
        ("nextval() per ID vs snowflake_next_id()", s["nextval()"]["ns_per_id"] / one, "≥ 2",
         s["nextval()"]["ns_per_id"] / one >= 2),
        ("single calls per ID vs snowflake_next_ids()", one / s["snowflake_next_ids(n)"]["ns_per_id"], "≥ 2",
         one / s["snowflake_next_ids(n)"]["ns_per_id"] >= 2),
        ("4 clients batched: snowflake_next_ids() vs nextval()", b4 / n4, "≥ 1.4", b4 / n4 >= 1.4),
        ("4 clients batched: share of the layout's ceiling", b4 / ceiling, "≥ 0.85", b4 / ceiling >= 0.85),
        ("batched rate at 8 clients vs best (no collapse)", rates[-1] / max(rates), "no collapse",
         rates[-1] / max(rates) >= 0.7),
        ("insert time vs bigserial", ins["snowflake_next_id()"]["ms"] / ins["bigserial"]["ms"], "≤ 1.05",
         ins["snowflake_next_id()"]["ms"] / ins["bigserial"]["ms"] <= 1.05),
        ("index size vs bigserial", ins["snowflake_next_id()"]["index_bytes"] / ins["bigserial"]["index_bytes"],
         "≤ 1.05", ins["snowflake_next_id()"]["index_bytes"] / ins["bigserial"]["index_bytes"] <= 1.05),
    ]
    out = ["", "### Targets", "", "| ratio | measured | target | met |", "|---|---:|---|---|"]
    out += [f"| {name} | {value:.2f} | {want} | {'yes' if ok else 'no'} |" for name, value, want, ok in rows]
    return "\n".join(out) + "\n"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-config", required=True)
    p.add_argument("--out", required=True, help="directory for <name>.md, .json and .svg")
    p.add_argument("--name", help="file name stem, default pgNN")
    p.add_argument("--quick", action="store_true", help="small sizes and few rounds, for trying the script")
    args = p.parse_args()

    quick = args.quick
    meta = {
        "n": 100_000 if quick else 1_000_000,
        "rounds": 3 if quick else 7,
        "clients": [1, 2, 4, 8],
        "seconds": 1 if quick else 3,
        "conc_rounds": 1 if quick else 3,
        "batch": 10_000,
        "rows": 100_000 if quick else 1_000_000,
        "insert_rounds": 1 if quick else 3,
        "ceiling_ids_per_s": 4096 * 1000,
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
    }
    rng = random.Random(20261122)
    server = Server(args.pg_config, [])
    try:
        server.psql("CREATE EXTENSION snowflake_id; CREATE SEQUENCE bench_seq;" + INSTAGRAM_STYLE)
        meta["server"] = server.psql("SHOW server_version;").strip().split()[0]
        meta["server"] = f"PostgreSQL {meta['server']}"
        print(f"== {meta['server']}: one session", flush=True)
        single = one_session(server, meta["n"], meta["rounds"], rng)
        print("== concurrency", flush=True)
        conc = concurrency(server, meta["clients"], meta["seconds"], meta["conc_rounds"], meta["batch"], rng)
        print("== inserts", flush=True)
        ins = inserts(server, meta["rows"], meta["insert_rounds"], rng)
        status = server.psql("\\x on\nSELECT ids_issued, ticks_borrowed, sequence_exhaustions, waits, marks_written, "
                             "mark_wal_time_ms, mark_file_time_ms "
                             "FROM snowflake_status();")
    finally:
        server.stop()
    text, target_table = report(meta, single, conc, ins)
    text += target_table
    text += "\nGenerator counters after the run:\n\n```\n" + status.strip() + "\n```\n"
    name = args.name or f"pg{server.major}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{name}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump({"meta": meta, "single": single, "concurrency": {m: {g: {str(c): v for c, v in by.items()}
                                                                       for g, by in gs.items()}
                                                                   for m, gs in conc.items()},
                   "inserts": ins}, f, indent=1)
    with open(os.path.join(args.out, f"{name}.svg"), "w") as f:
        f.write(chart.svg(meta, single, conc))
    print(text)


if __name__ == "__main__":
    main()
