#!/usr/bin/env python3
"""The hot path of snowflake_next_id(), against its floor and its peers.

Starts a throwaway server of the given installation with snowflake_id and,
when its source is given, pgEdge's snowflake extension preloaded side by side,
and measures, interleaved in rounds (medians):

1. one session, one ID per call, as `count(f)` over a million rows: the time
   per ID of snowflake_next_id(), nextval() and pgEdge's nextval, against
   clock_timestamp() (the floor: one function call that reads the clock);
   and snowflake_next_ids(n) against generate_series() of as many bigints;
2. pgbench -M prepared, one ID per statement, 4 and 8 clients: IDs per
   second of the same generators;
3. as many sessions as the machine has cores at once, each calling a
   generator as in 1 (`count(f)` over rows, through pgbench): IDs per second,
   where the generator's lock is contended and not hidden behind statements.

The whole measurement is repeated (--runs, each on a new server), and every
ratio is reported per run. pgEdge's extension is built from a checkout of its
public repository (--pgedge-src or SNOWFLAKE_PGEDGE_SRC) into a temporary
directory and preloaded from there: nothing is installed into PostgreSQL.
Asserts nothing about time.
"""

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import Server, cpu_model  # noqa: E402

FLOOR = "clock_timestamp() (floor)"
OURS = "snowflake_next_id()"
NEXTVAL = "nextval()"
PGEDGE = "pgEdge snowflake.nextval()"
BULK = "snowflake_next_ids(n)"
SERIES = "generate_series(1, n)"


def build_pgedge(src, pg_config):
    """Builds pgEdge's library from `src` in a temporary copy; returns its directory."""
    out = tempfile.mkdtemp(prefix="sfbench-pgedge.", dir="/tmp")
    shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
    subprocess.run(["make", "-s", "USE_PGXS=1", f"PG_CONFIG={pg_config}", "snowflake.so"], cwd=out, check=True,
                   capture_output=True)
    os.chmod(out, 0o755)
    return out


def start(pg_config, pgedge_dir):
    settings = []
    if pgedge_dir:
        # A path in shared_preload_libraries is loaded as it is.
        settings += [f"shared_preload_libraries = 'snowflake_id,{pgedge_dir}/snowflake'", "snowflake.node = 1"]
    server = Server(pg_config, settings)
    setup = "CREATE EXTENSION snowflake_id; CREATE SEQUENCE bench_seq;"
    if pgedge_dir:
        # pgEdge's nextval works on any sequence; its extension script adds
        # nothing the call needs.
        setup += (f"CREATE SEQUENCE pgedge_seq; CREATE FUNCTION pgedge_nextval(regclass) RETURNS bigint "
                  f"STRICT VOLATILE LANGUAGE c AS '{pgedge_dir}/snowflake', 'snowflake_nextval';")
    server.psql(setup)
    return server


def one_session(server, n, rounds, rng, pgedge):
    queries = {
        FLOOR: f"SELECT count(clock_timestamp()) FROM generate_series(1, {n})",
        OURS: f"SELECT count(snowflake_next_id()) FROM generate_series(1, {n})",
        NEXTVAL: f"SELECT count(nextval('bench_seq')) FROM generate_series(1, {n})",
        BULK: f"SELECT count(*) FROM snowflake_next_ids({n})",
        SERIES: f"SELECT count(*) FROM generate_series(1::bigint, {n})",
    }
    if pgedge:
        queries[PGEDGE] = f"SELECT count(pgedge_nextval('pgedge_seq')) FROM generate_series(1, {n})"
    names = list(queries)
    server.timings([queries[k] for k in names])  # warm up
    samples = {k: [] for k in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name, ms in zip(names, server.timings([queries[k] for k in names])):
            samples[name].append(ms * 1e6 / n)
    return {k: statistics.median(v) for k, v in samples.items()}


def concurrency(server, clients, seconds, rounds, rng, pgedge):
    statements = {
        FLOOR: "SELECT clock_timestamp();",
        OURS: "SELECT snowflake_next_id();",
        NEXTVAL: "SELECT nextval('bench_seq');",
    }
    if pgedge:
        statements[PGEDGE] = "SELECT pgedge_nextval('pgedge_seq');"
    keys = [(g, c) for g in statements for c in clients]
    samples = {k: [] for k in keys}
    for _ in range(rounds):
        rng.shuffle(keys)
        for g, c in keys:
            samples[(g, c)].append(server.pgbench(statements[g], c, seconds)[0])
    return {g: {c: statistics.median(samples[(g, c)]) for c in clients} for g in statements}


def sessions_at_once(server, sessions, n, seconds, rounds, rng, pgedge):
    calls = {FLOOR: "clock_timestamp()", OURS: "snowflake_next_id()", NEXTVAL: "nextval('bench_seq')"}
    if pgedge:
        calls[PGEDGE] = "pgedge_nextval('pgedge_seq')"
    names = list(calls)
    samples = {k: [] for k in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for g in names:
            tps = server.pgbench(f"SELECT count({calls[g]}) FROM generate_series(1, {n});", sessions, seconds)[0]
            samples[g].append(tps * n)
    return {g: statistics.median(v) for g, v in samples.items()}


def ratios(single, conc, clients, at_once):
    """The issue's ratios, and some for context: (name, value, target, met)."""
    rows = [
        ("snowflake_next_id() per ID vs clock_timestamp()", single[OURS] / single[FLOOR], "≤ 1.12", lambda v: v <= 1.12),
        ("snowflake_next_id() per ID vs nextval()", single[OURS] / single[NEXTVAL], "≤ 0.5", lambda v: v <= 0.5),
    ]
    if PGEDGE in single:
        rows.append(("snowflake_next_id() per ID vs pgEdge's nextval", single[OURS] / single[PGEDGE], "≤ 0.5",
                     lambda v: v <= 0.5))
    for c in clients:
        rows.append((f"{c} clients: IDs/s vs nextval()", conc[OURS][c] / conc[NEXTVAL][c], "≥ 1.6", lambda v: v >= 1.6))
        if PGEDGE in conc:
            rows.append((f"{c} clients: IDs/s vs pgEdge's nextval", conc[OURS][c] / conc[PGEDGE][c], "≥ 1.3",
                         lambda v: v >= 1.3))
        rows.append((f"{c} clients: IDs/s vs clock_timestamp() (the floor's rate)", conc[OURS][c] / conc[FLOOR][c],
                     "(context)", None))
        if PGEDGE in conc:
            rows.append((f"{c} clients: pgEdge's IDs/s vs clock_timestamp()", conc[PGEDGE][c] / conc[FLOOR][c],
                         "(context)", None))
        # What any generator could reach against nextval() here: the floor's rate over nextval's.
        rows.append((f"{c} clients: clock_timestamp()'s rate vs nextval()", conc[FLOOR][c] / conc[NEXTVAL][c],
                     "(context)", None))
    rows.append(("snowflake_next_ids(n) per ID vs generate_series()", single[BULK] / single[SERIES], "≤ 1.5",
                 lambda v: v <= 1.5))
    if at_once:
        rows.append(("sessions at once: IDs/s vs clock_timestamp()", at_once[OURS] / at_once[FLOOR], "(context)", None))
        rows.append(("sessions at once: IDs/s vs nextval()", at_once[OURS] / at_once[NEXTVAL], "(context)", None))
        if PGEDGE in at_once:
            rows.append(("sessions at once: IDs/s vs pgEdge's nextval", at_once[OURS] / at_once[PGEDGE], "(context)",
                         None))
    return [(name, value, want, None if ok is None else ok(value)) for name, value, want, ok in rows]


def report(meta, runs):
    clients = meta["clients"]
    lines = [
        f"## snowflake_next_id() hot path: {meta['server']}",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['cores']} cores; {len(runs)} runs, each on a new server with "
        f"snowflake_id{' and pgEdge snowflake ' + meta['pgedge'] if meta['pgedge'] else ''} preloaded, generators "
        f"interleaved in rounds (medians of {meta['rounds']} rounds of {meta['n']:,} IDs in one session; of "
        f"{meta['conc_rounds']} rounds of {meta['seconds']} s of pgbench -M prepared).",
        "",
        "### One session: ns per ID",
        "",
        "| generator | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for g in runs[0]["single"]:
        lines.append(f"| {g} | " + " | ".join(f"{r['single'][g]:.1f}" for r in runs) + " |")
    lines += ["", "### One ID per statement: IDs per second", "",
              "| generator | " + " | ".join(f"{c} clients, run {i + 1}" for c in clients for i in range(len(runs)))
              + " |", "|---|" + "---:|" * (len(runs) * len(clients))]
    for g in runs[0]["concurrency"]:
        lines.append(f"| {g} | " + " | ".join(f"{r['concurrency'][g][c]:,.0f}" for c in clients for r in runs) + " |")
    if runs[0].get("at_once"):
        lines += ["", f"### {meta['sessions']} sessions at once, each as in one session "
                  f"({meta['at_once_n']:,} IDs a statement): IDs per second", "",
                  "| generator | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |",
                  "|---|" + "---:|" * len(runs)]
        for g in runs[0]["at_once"]:
            lines.append(f"| {g} | " + " | ".join(f"{r['at_once'][g]:,.0f}" for r in runs) + " |")
    lines += ["", "### Ratios", "", "| ratio | " + " | ".join(f"run {i + 1}" for i in range(len(runs)))
              + " | target | met in every run |", "|---|" + "---:|" * len(runs) + "---|---|"]
    table = [ratios(r["single"], r["concurrency"], clients, r.get("at_once")) for r in runs]
    for i, (name, _, want, _) in enumerate(table[0]):
        met = [t[i][3] for t in table]
        verdict = "" if met[0] is None else ("yes" if all(met) else "no")
        lines.append(f"| {name} | " + " | ".join(f"{t[i][1]:.3f}" for t in table) + f" | {want} | {verdict} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-config", required=True)
    p.add_argument("--out", required=True, help="directory for hot-path-pgNN.md and .json")
    p.add_argument("--pgedge-src", default=os.environ.get("SNOWFLAKE_PGEDGE_SRC"),
                   help="a checkout of github.com/pgEdge/snowflake (without it, pgEdge is left out)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes and few rounds, for trying the script")
    args = p.parse_args()
    meta = {
        "n": 100_000 if args.quick else 1_000_000,
        "rounds": 3 if args.quick else 7,
        "clients": [4, 8],
        "seconds": 1 if args.quick else 4,
        "conc_rounds": 1 if args.quick else 5,
        "sessions": os.cpu_count(),
        "at_once_n": 20_000 if args.quick else 200_000,
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "pgedge": None,
    }
    pgedge_dir = None
    if args.pgedge_src:
        pgedge_dir = build_pgedge(args.pgedge_src, args.pg_config)
        head = subprocess.run(["git", "-C", args.pgedge_src, "log", "-1", "--format=%h %cs"], text=True,
                              capture_output=True)
        meta["pgedge"] = head.stdout.strip() or "(source without git history)"
    rng = random.Random(20261125)
    runs = []
    try:
        for i in range(args.runs):
            server = start(args.pg_config, pgedge_dir)
            try:
                meta["server"] = "PostgreSQL " + server.psql("SHOW server_version;").split()[0]
                print(f"== {meta['server']}, run {i + 1} of {args.runs}: one session", flush=True)
                single = one_session(server, meta["n"], meta["rounds"], rng, pgedge_dir)
                print("== one ID per statement", flush=True)
                conc = concurrency(server, meta["clients"], meta["seconds"], meta["conc_rounds"], rng, pgedge_dir)
                print(f"== {meta['sessions']} sessions at once", flush=True)
                at_once = sessions_at_once(server, meta["sessions"], meta["at_once_n"], meta["seconds"],
                                           meta["conc_rounds"], rng, pgedge_dir)
            finally:
                server.stop()
            runs.append({"single": single, "concurrency": conc, "at_once": at_once})
    finally:
        if pgedge_dir:
            shutil.rmtree(pgedge_dir, ignore_errors=True)
    text = report(meta, runs)
    name = f"hot-path-pg{server.major}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{name}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump({"meta": meta, "runs": [{"single": r["single"],
                                           "concurrency": {g: {str(c): v for c, v in by.items()}
                                                           for g, by in r["concurrency"].items()},
                                           "at_once": r["at_once"]}
                                          for r in runs]}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
