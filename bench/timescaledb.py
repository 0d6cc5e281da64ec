#!/usr/bin/env python3
"""Measures inserts into TimescaleDB hypertables keyed by snowflake IDs
against the keys people use there: a bigserial and the time alone.

Starts one server of the given installation with
shared_preload_libraries = 'timescaledb,snowflake_id' (the order
docs/timescaledb.md asks for) and, in rounds whose order rotates, makes each
hypertable afresh and fills it with N rows in one statement:

- snowflake_next_id(): keyed and partitioned by the ID (chunks of a day of
  IDs, snowflake_from_interval);
- snowflake_next_id(), time column: the ID as key, partitioned by a
  timestamptz column (DEFAULT now());
- bigserial: a native sequence as key, partitioned by the time column;
- registered bigserial: the same sequence registered (sequence mode);
- now() alone: the time column as the only dimension, no key.

Then COPY of N rows (text, from a file, key left out) into the bigserial, the
registered bigserial (snowflake_id reads it and inserts in batches) and the
snowflake_next_id() hypertables. Finally chunk exclusion: the chunks a query
for the last day scans in a table partitioned by the ID.

Writes docs/bench/timescaledb-pgNN.md. Reports ratios; asserts nothing about time.
"""

import argparse
import datetime
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import Server, cpu_model  # noqa: E402

KEYED = {
    "snowflake_next_id(), partitioned by the ID": (
        "CREATE TABLE h (id bigint PRIMARY KEY DEFAULT snowflake_next_id(), v int);"
        "SELECT create_hypertable('h', by_range('id', snowflake_from_interval('1 day')));"),
    "snowflake_next_id(), partitioned by time": (
        "CREATE TABLE h (id bigint NOT NULL DEFAULT snowflake_next_id(), at timestamptz NOT NULL DEFAULT now(),"
        " v int, PRIMARY KEY (id, at)); SELECT create_hypertable('h', by_range('at', interval '1 day'));"),
    "bigserial, partitioned by time": (
        "CREATE TABLE h (id bigserial, at timestamptz NOT NULL DEFAULT now(), v int, PRIMARY KEY (id, at));"
        "SELECT create_hypertable('h', by_range('at', interval '1 day'));"),
    "registered bigserial, partitioned by time": (
        "CREATE TABLE h (id bigserial, at timestamptz NOT NULL DEFAULT now(), v int, PRIMARY KEY (id, at));"
        "SELECT create_hypertable('h', by_range('at', interval '1 day'));"
        "SELECT snowflake_sequence_register('h_id_seq');"),
    "now() alone, no key": (
        "CREATE TABLE h (at timestamptz NOT NULL DEFAULT now(), v int);"
        "SELECT create_hypertable('h', by_range('at', interval '1 day'));"),
}
COPIED = ["bigserial, partitioned by time", "registered bigserial, partitioned by time",
          "snowflake_next_id(), partitioned by time"]


def fill(server, ddl, rows):
    server.psql(f"DROP TABLE IF EXISTS h; {ddl}")
    server.psql("CHECKPOINT")
    (ms,) = server.timings([f"INSERT INTO h (v) SELECT i FROM generate_series(1, {rows}) i"])
    return rows / (ms / 1000.0)


def copy(server, ddl, rows, path):
    server.psql(f"DROP TABLE IF EXISTS h; {ddl}")
    server.psql("CHECKPOINT")
    (ms,) = server.timings([f"COPY h (v) FROM '{path}'"])
    got = int(server.psql("SELECT count(*) FROM h").strip())
    assert got == rows, f"COPY stored {got} rows, not {rows}"
    return rows / (ms / 1000.0)


def ratio_table(what, results, base, n):
    """A table of each variant's median rate and its ratio to `base`'s."""
    base_rate = statistics.median(results[base])
    lines = [f"| {what}, rows per second (median) | rows/s | against bigserial |", "|---|---:|---:|"]
    for name, rates in results.items():
        med = statistics.median(rates)
        lines.append(f"| {name} | {n(med)} | {med / base_rate:.2f} |")
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pg-config", required=True)
    p.add_argument("--out", default="docs/bench")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    server = Server(args.pg_config, ["shared_preload_libraries = 'timescaledb,snowflake_id'",
                                     "timescaledb.telemetry_level = off", "snowflake_id.worker_id = 1"])
    try:
        server.psql("CREATE EXTENSION timescaledb; CREATE EXTENSION snowflake_id")
        tsdb = server.psql("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'").strip()
        data = os.path.join(server.dir, "rows.txt")
        with open(data, "w") as f:
            f.write("".join(f"{i}\n" for i in range(args.rows)))
        os.chmod(data, 0o644)
        names = list(KEYED)
        inserted = {n: [] for n in names}
        copied = {n: [] for n in COPIED}
        fill(server, KEYED[names[0]], args.rows // 10)  # warm-up, not counted
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                inserted[name].append(fill(server, KEYED[name], args.rows))
            for name in COPIED[r % len(COPIED):] + COPIED[:r % len(COPIED)]:
                copied[name].append(copy(server, KEYED[name], args.rows, data))
        # Chunk exclusion: ten days of rows in a table partitioned by the ID,
        # and the chunks a query for the last day scans.
        server.psql(
            "DROP TABLE IF EXISTS h; " + KEYED[names[0]] +
            "INSERT INTO h SELECT snowflake_from_timestamp(now() - d * interval '1 day') + i, d"
            " FROM generate_series(0, 9) d, generate_series(1, 1000) i;")
        plan = server.psql("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "
                           "SELECT count(*) FROM h WHERE id >= snowflake_from_timestamp(now() - interval '1 day')")
        total = int(server.psql("SELECT count(*) FROM show_chunks('h')").strip())
        scanned = sorted({m for m in re.findall(r"_hyper_\d+_\d+_chunk", plan)
                          if not re.search(m + r".*never executed", plan)})
        version = server.version
    finally:
        server.stop()

    def n(x):
        return f"{x:,.0f}".replace(",", " ")

    major = re.search(r"PostgreSQL (\d+)", version).group(1)
    lines = [
        f"# TimescaleDB hypertables: inserts by key (PostgreSQL {major})",
        "",
        f"Measured {datetime.date.today()} with `python3 bench/timescaledb.py` on {cpu_model()}, {version}, "
        f"TimescaleDB {tsdb} (Debian's), snowflake_id's release build, "
        "`shared_preload_libraries = 'timescaledb,snowflake_id'`. Each hypertable is made afresh and filled "
        f"with {n(args.rows)} rows in one statement, {args.rounds} rounds in rotating order; chunks of a day "
        "(all rows fall in today's chunk).",
        "",
    ]
    lines += ratio_table("INSERT ... SELECT", inserted, "bigserial, partitioned by time", n)
    lines += [""] + ratio_table("COPY FROM a file (text, key left out)", copied, "bigserial, partitioned by time", n)
    lines += [
        "",
        "A registered bigserial's COPY is read by snowflake_id and inserted in batches of 1,000 rows "
        "(TimescaleDB runs a hypertable's COPY itself, past snowflake_id's hook); the others are "
        "TimescaleDB's own COPY.",
        "",
        f"Chunk exclusion, a table partitioned by the ID with ten days of rows ({total} chunks): "
        f"`WHERE id >= snowflake_from_timestamp(now() - interval '1 day')` scanned {len(scanned)} "
        f"chunk(s) ({', '.join(scanned)}).",
        "",
        "Each round:",
        "",
    ]
    for name in names:
        lines.append(f"- insert, {name}: {', '.join(n(x) for x in inserted[name])}")
    for name in COPIED:
        lines.append(f"- COPY, {name}: {', '.join(n(x) for x in copied[name])}")
    out = os.path.join(args.out, f"timescaledb-pg{major}.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
