#!/usr/bin/env python3
"""Records what a dashboard of monitoring/queries.yaml shows over a run with
a clock step back and refusals, and draws it (docs/monitoring.md's picture).

Starts a throwaway server of the given installation under libfaketime, and
Debian's prometheus-postgres-exporter with monitoring/queries.yaml as a
pg_monitor role; scrapes /metrics every second while a client takes IDs in
bulk. Phases: normal; the clock steps back within snowflake_id.max_clock_drift
(IDs run ahead of it); the clock steps back beyond it (calls wait
snowflake_id.max_wait, then are refused); the clock is set right. Writes the
recorded scrape (dashboard.json) and the chart (dashboard.svg). Asserts
nothing about time.
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chart  # noqa: E402
from bench import Server, as_postgres  # noqa: E402

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
EXPORTER = "/usr/bin/prometheus-postgres-exporter"
QUERIES = os.path.join(HERE, "..", "monitoring", "queries.yaml")

# The run's phases: (from second, to second, what happens).
PHASES = [
    (0, 30, "normal"),
    (30, 60, "the clock steps back 1.5 s, within max_clock_drift: IDs run ahead of it"),
    (60, 150, "the clock steps back 6 s every 5 s, beyond max_clock_drift: calls wait max_wait, then are refused"),
    (150, 180, "the clock is set right"),
]
SECONDS = 180


def clock_offset(t):
    """The server's clock offset from the real one, in seconds, at second t of the run."""
    if 30 <= t < 60:
        return -1.5
    if 60 <= t < 150:
        return -6 * (1 + int((t - 60) // 5))
    return 0


def parse(text):
    """snowflake_* samples of a scrape, keyed by name and labels."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("snowflake_"):
            continue
        series, value = line.rsplit(" ", 1)
        out[series] = float(value)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pg-config", required=True)
    p.add_argument("--out", required=True, help="directory for dashboard.json and dashboard.svg")
    args = p.parse_args()

    clock = tempfile.NamedTemporaryFile("w", prefix="sfclock.", dir="/tmp", delete=False)
    clock.write("+0\n")
    clock.close()
    os.chmod(clock.name, 0o644)

    def set_offset(seconds):
        tmp = clock.name + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{seconds:+}\n")
        os.chmod(tmp, 0o644)
        os.rename(tmp, clock.name)

    env = [f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME_TIMESTAMP_FILE={clock.name}", "FAKETIME_CACHE_DURATION=1",
           "FAKETIME_DONT_FAKE_MONOTONIC=1", "NO_FAKE_STAT=1"]
    server = Server(args.pg_config, ["snowflake_id.max_clock_drift = '3s'", "snowflake_id.max_wait = '500ms'",
                                     "snowflake_id.datacenter_id = 1", "snowflake_id.worker_id = 7"], env)
    exporter = loader = None
    try:
        server.psql("CREATE EXTENSION snowflake_id; CREATE ROLE dashboard_exporter LOGIN IN ROLE pg_monitor;")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exporter = subprocess.Popen(
            [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", f"--extend.query-path={os.path.abspath(QUERIES)}",
             "--disable-default-metrics", "--disable-settings-metrics", "--no-collector.database",
             "--no-collector.bgwriter"],
            env={**os.environ, "DATA_SOURCE_NAME":
                 f"host=127.0.0.1 port={server.port} user=dashboard_exporter dbname=postgres sslmode=disable"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # A client taking 2,000 IDs at a time; a refused call fails and the next one follows.
        psql = " ".join(as_postgres([f"{server.bindir}/psql", "-h", server.dir, "-p", str(server.port),
                                     "-U", "postgres", "-X", "-q", "-c",
                                     "'SELECT count(*) FROM snowflake_next_ids(2000)'"]))
        loader = subprocess.Popen(["bash", "-c", f"while :; do {psql} >/dev/null 2>&1; sleep 0.02; done"],
                                  start_new_session=True)
        url = f"http://127.0.0.1:{port}/metrics"
        scrapes, offset = [], 0
        start = time.monotonic()
        while (t := time.monotonic() - start) < SECONDS:
            if clock_offset(t) != offset:
                offset = clock_offset(t)
                set_offset(offset)
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
                scrapes.append({"t": round(t, 2), "unix": time.time(), "samples": parse(text)})
            except OSError:
                pass  # the exporter is not listening yet
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start - t)))
    finally:
        if loader:
            os.killpg(loader.pid, 15)
        if exporter:
            exporter.terminate()
        server.stop()
        os.unlink(clock.name)

    recording = {
        "meta": {"server": server.version, "date": datetime.date.today().isoformat(),
                 "settings": {"max_clock_drift": "3s", "max_wait": "500ms"}, "scrape_interval_s": 1,
                 "phases": [{"from_s": a, "to_s": b, "what": what} for a, b, what in PHASES]},
        "scrapes": scrapes,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dashboard.json"), "w") as f:
        json.dump(recording, f, indent=1)
    with open(os.path.join(args.out, "dashboard.svg"), "w") as f:
        f.write(chart.dashboard(recording))
    print(f"{len(scrapes)} scrapes: {args.out}/dashboard.json, {args.out}/dashboard.svg")


if __name__ == "__main__":
    main()
