#!/usr/bin/env python3
"""Benchmarks sequence mode side by side, in one run.

Two throwaway servers of the given installation: one with snowflake_id
preloaded and installed (its hooks in place) and one without the library.
Interleaved in rounds, medians reported:

1. per ID, one session: nextval() of a registered sequence against native
   nextval() of an unregistered one (same server);
2. COPY FROM of many rows into a table whose omitted identity or serial key
   takes a registered sequence's default, against the same table unregistered;
3. what the hooks cost those who register nothing: native nextval() and
   pgbench -S (simple protocol: every statement planned) on the server with
   the extension installed and nothing registered, against the server without
   the library;
4. what a new connection costs: pgbench -S -C (a connection per transaction,
   as applications without a pooler run) in a database with the extension
   created (nothing registered, and 1,000 sequences registered), against a
   database of the same server without it, and the server without the library;
5. a registered nextval() in a REPEATABLE READ transaction that has written
   and in which a registered sequence's relcache entry was invalidated,
   against the same in READ COMMITTED.

Writes a markdown report and a JSON file. Reports ratios; asserts nothing about time.
"""

import argparse
import datetime
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import Server, as_postgres, cpu_model, median, run  # noqa: E402

SETUP = """
CREATE EXTENSION snowflake_id;
CREATE SEQUENCE nat_seq;
CREATE SEQUENCE reg_seq;
SELECT snowflake_sequence_register('reg_seq');
CREATE TABLE nat_identity (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
CREATE TABLE reg_identity (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
CREATE TABLE nat_serial (id bigserial PRIMARY KEY, note text);
CREATE TABLE reg_serial (id bigserial PRIMARY KEY, note text);
SELECT snowflake_sequence_register(pg_get_serial_sequence('reg_identity', 'id'));
SELECT snowflake_sequence_register('reg_serial_id_seq');
"""


def per_id(server, n, rounds, rng):
    queries = {
        "native nextval()": f"SELECT count(nextval('nat_seq')) FROM generate_series(1, {n})",
        "registered nextval()": f"SELECT count(nextval('reg_seq')) FROM generate_series(1, {n})",
        "snowflake_next_id()": f"SELECT count(snowflake_next_id()) FROM generate_series(1, {n})",
    }
    names = list(queries)
    server.timings([queries[k] for k in names])
    samples = {k: [] for k in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name, ms in zip(names, server.timings([queries[k] for k in names])):
            samples[name].append(ms)
    return {k: {"ms": median(v), "ns_per_id": median(v) * 1e6 / n, "samples": v} for k, v in samples.items()}


def copies(server, rows, rounds, rng):
    path = os.path.join(server.dir, "rows.txt")
    with open(path, "w") as f:
        f.writelines(f"row {i}\n" for i in range(rows))
    os.chmod(path, 0o644)
    tables = ["nat_identity", "reg_identity", "nat_serial", "reg_serial"]
    samples = {t: [] for t in tables}
    for _ in range(rounds):
        rng.shuffle(tables)
        for t in tables:
            server.psql(f"TRUNCATE {t}; CHECKPOINT;")
            (ms,) = server.timings([f"COPY {t} (note) FROM '{path}'"])
            samples[t].append(ms)
    out = server.psql("SELECT count(*) FILTER (WHERE id > 1e15) FROM reg_identity;")
    assert int(out) == rows, f"registered COPY stored {out.strip()} snowflake keys of {rows}"
    return {t: {"ms": median(v), "samples": v} for t, v in samples.items()}


def bystanders(hooked, plain, n, seconds, rounds, rng):
    """Native nextval() and pgbench -S on a server with the hooks and nothing registered, and on one without."""
    for s in (hooked, plain):
        run(as_postgres([f"{s.bindir}/pgbench", "-h", s.dir, "-p", str(s.port), "-U", "postgres", "-i", "-q",
                         "-s", "1", "postgres"]))
        s.psql("CREATE SEQUENCE IF NOT EXISTS by_seq;")
    keys = [(name, kind) for name in ("hooked", "plain") for kind in ("nextval", "pgbench -S")]
    servers = {"hooked": hooked, "plain": plain}
    samples = {k: [] for k in keys}
    for _ in range(rounds):
        rng.shuffle(keys)
        for name, kind in keys:
            s = servers[name]
            if kind == "nextval":
                (ms,) = s.timings([f"SELECT count(nextval('by_seq')) FROM generate_series(1, {n})"])
                samples[(name, kind)].append(ms)
            else:
                samples[(name, kind)].append(s.pgbench_builtin(["-S", "-M", "simple"], 1, seconds))
    result = {}
    for (name, kind), v in samples.items():
        result.setdefault(kind, {})[name] = {"median": median(v), "samples": v}
    return result


def connections(hooked, plain, seconds, rounds, rng):
    """pgbench -S -C in databases with and without the extension."""
    for db in ("noext", "ext", "reg"):
        hooked.psql(f"CREATE DATABASE {db};")
    for s, db in ((plain, "postgres"), (hooked, "noext"), (hooked, "ext"), (hooked, "reg")):
        run(as_postgres([f"{s.bindir}/pgbench", "-h", s.dir, "-p", str(s.port), "-U", "postgres", "-i", "-q",
                         "-s", "1", db]))
    hooked.psql("CREATE EXTENSION snowflake_id;", "ext")
    hooked.psql("CREATE EXTENSION snowflake_id; CREATE SCHEMA many;"
                "SELECT format('CREATE SEQUENCE many.s%s', g) FROM generate_series(1, 1000) g \\gexec\n"
                "SELECT count(*) FROM snowflake_sequence_register_schema('many');", "reg")
    cases = {
        "no library": (plain, "postgres"),
        "library, no extension": (hooked, "noext"),
        "extension, nothing registered": (hooked, "ext"),
        "extension, 1,000 registered": (hooked, "reg"),
    }
    names = list(cases)
    samples = {k: [] for k in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            server, db = cases[name]
            samples[name].append(server.pgbench_builtin(["-S", "-C", "-M", "simple"], 1, seconds, db))
    return {k: {"median": median(v), "samples": v} for k, v in samples.items()}


def repeatable_read(server, n, rounds, rng):
    """A registered nextval() after a write and an invalidation of a registered sequence, by isolation level."""
    server.psql("CREATE TABLE rr_w (x int); CREATE SEQUENCE rr_other; SELECT snowflake_sequence_register('rr_other');")
    body = ["INSERT INTO rr_w VALUES (1)", "GRANT SELECT ON SEQUENCE rr_other TO PUBLIC",
            f"SELECT count(nextval('reg_seq')) FROM generate_series(1, {n})", "COMMIT"]
    cases = {"READ COMMITTED": ["BEGIN"] + body, "REPEATABLE READ": ["BEGIN ISOLATION LEVEL REPEATABLE READ"] + body}
    names = list(cases)
    samples = {k: [] for k in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            samples[name].append(server.timings(cases[name])[3])
    return {k: {"ms": median(v), "samples": v} for k, v in samples.items()}


def report(meta, ids, copy, by, conns, rr):
    reg, nat = ids["registered nextval()"]["ns_per_id"], ids["native nextval()"]["ns_per_id"]
    lines = [
        f"# Sequence mode, {meta['version']}",
        "",
        f"{meta['date']}, {meta['cpu']}, {meta['cores']} cores; {meta['rounds']} interleaved rounds, medians. "
        "Written by `bench/sequences.py` (run by `scripts/bench`).",
        "",
        f"## Per ID, one session ({meta['ids']:,} calls)",
        "",
        "| function | ns/ID | x native nextval() |",
        "|---|---:|---:|",
    ]
    for k, v in ids.items():
        lines.append(f"| {k} | {v['ns_per_id']:.0f} | {v['ns_per_id'] / nat:.2f} |")
    lines += ["", f"Registered nextval() costs **{reg / nat:.2f}x** native nextval() per ID (target: at most 0.6x).",
              "", f"## COPY FROM, {meta['rows']:,} rows, key omitted", "",
              "| key | unregistered ms | registered ms | ratio |", "|---|---:|---:|---:|"]
    for kind in ("identity", "serial"):
        n, r = copy[f"nat_{kind}"]["ms"], copy[f"reg_{kind}"]["ms"]
        lines.append(f"| {kind} | {n:.0f} | {r:.0f} | {r / n:.3f} |")
    lines += ["", "Target: registered within 1.10x of native COPY.", "",
              "## Nothing registered: the hooks' cost to everyone else", "",
              "Server A has snowflake_id preloaded and installed with nothing registered; server B has no library.",
              "", "| measure | A (hooks) | B (none) | A/B |", "|---|---:|---:|---:|"]
    a, b = by["nextval"]["hooked"]["median"], by["nextval"]["plain"]["median"]
    lines.append(f"| native nextval(), ms per {meta['ids']:,} | {a:.1f} | {b:.1f} | {a / b:.3f} |")
    a, b = by["pgbench -S"]["hooked"]["median"], by["pgbench -S"]["plain"]["median"]
    lines.append(f"| pgbench -S -M simple, tps (higher is better) | {a:.0f} | {b:.0f} | {a / b:.3f} |")
    lines += ["", "Target: within 3% (time ratio at most 1.03, tps ratio at least 0.97).", "",
              "## A connection per transaction", "",
              f"`pgbench -S -C -M simple`, one client, {meta['seconds']} s a round; the last three are databases of one "
              "server with the library preloaded.", "",
              "| database | tps | x the database without the extension |", "|---|---:|---:|"]
    base = conns["library, no extension"]["median"]
    for k, v in conns.items():
        lines.append(f"| {k} | {v['median']:.0f} | {v['median'] / base:.3f} |")
    lines += ["", "Target: the extension created costs a new connection at most 10% (ratio at least 0.90).", "",
              "## REPEATABLE READ", "",
              f"{meta['ids']:,} registered nextval() calls in a transaction that has written and in which a "
              "registered sequence's relcache entry was invalidated (a GRANT).", "",
              "| isolation | ms | x READ COMMITTED |", "|---|---:|---:|"]
    rc = rr["READ COMMITTED"]["ms"]
    for k, v in rr.items():
        lines.append(f"| {k} | {v['ms']:.1f} | {v['ms'] / rc:.2f} |")
    lines += ["", "Target: REPEATABLE READ within 2x of READ COMMITTED.", ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg-config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", help="file name stem, default sequences-pgNN")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    rounds, ids, rows, seconds = (2, 100_000, 100_000, 2) if args.quick else (7, 1_000_000, 1_000_000, 10)
    rng = random.Random(29)
    hooked = Server(args.pg_config, [])
    plain = Server(args.pg_config, ["shared_preload_libraries = ''"])
    try:
        hooked.psql(SETUP)
        meta = {
            "version": hooked.version, "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
            "cores": os.cpu_count(), "rounds": rounds, "ids": ids, "rows": rows, "seconds": seconds,
        }
        result = {
            "meta": meta,
            "per_id": per_id(hooked, ids, rounds, rng),
            "copy": copies(hooked, rows, rounds, rng),
            "bystanders": bystanders(hooked, plain, ids, seconds, rounds, rng),
            "connections": connections(hooked, plain, seconds, rounds, rng),
            "repeatable_read": repeatable_read(hooked, ids, rounds, rng),
        }
    finally:
        hooked.stop()
        plain.stop()
    name = args.name or f"sequences-pg{hooked.major}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    text = report(meta, result["per_id"], result["copy"], result["bystanders"], result["connections"],
                  result["repeatable_read"])
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
