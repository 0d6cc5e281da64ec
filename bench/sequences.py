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
   the library.

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


def report(meta, ids, copy, by):
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
    lines += ["", "Target: within 3% (time ratio at most 1.03, tps ratio at least 0.97).", ""]
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
            "cores": os.cpu_count(), "rounds": rounds, "ids": ids, "rows": rows,
        }
        result = {
            "meta": meta,
            "per_id": per_id(hooked, ids, rounds, rng),
            "copy": copies(hooked, rows, rounds, rng),
            "bystanders": bystanders(hooked, plain, ids, seconds, rounds, rng),
        }
    finally:
        hooked.stop()
        plain.stop()
    name = args.name or f"sequences-pg{hooked.major}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    text = report(meta, result["per_id"], result["copy"], result["bystanders"])
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
