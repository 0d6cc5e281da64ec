"""SVG charts of a benchmark run and of a recorded monitoring scrape, without plotting libraries."""

from html import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
HIGHLIGHT = "#d62728"


def _bars(x0, y0, width, title, items, unit):
    """Horizontal bars; items are (label, value)."""
    label_w, bar_h, gap = 190, 20, 8
    top = y0 + 30
    vmax = max(v for _, v in items) or 1
    scale = (width - label_w - 70) / vmax
    out = [f'<text x="{x0}" y="{y0 + 15}" class="title">{escape(title)}</text>']
    for i, (label, value) in enumerate(items):
        y = top + i * (bar_h + gap)
        color = HIGHLIGHT if label.startswith("snowflake") else "#7f7f7f"
        out.append(f'<text x="{x0 + label_w - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        out.append(f'<rect x="{x0 + label_w}" y="{y}" width="{max(value * scale, 1):.1f}" height="{bar_h}" '
                   f'fill="{color}"/>')
        out.append(f'<text x="{x0 + label_w + value * scale + 5:.1f}" y="{y + 15}">{value:,.0f} {unit}</text>')
    return out, top + len(items) * (bar_h + gap)


def _lines(x0, y0, width, height, title, series, xs):
    """Lines of IDs per second against clients; series are (label, [values])."""
    left, bottom, right = 70, 30, 190
    plot_w, plot_h = width - left - right, height - bottom - 40
    px0, py0 = x0 + left, y0 + 30 + plot_h
    vmax = max(max(v) for _, v in series) * 1.1 or 1
    out = [f'<text x="{x0}" y="{y0 + 15}" class="title">{escape(title)}</text>',
           f'<line x1="{px0}" y1="{py0}" x2="{px0 + plot_w}" y2="{py0}" stroke="#333"/>',
           f'<line x1="{px0}" y1="{py0}" x2="{px0}" y2="{py0 - plot_h}" stroke="#333"/>']
    for k in range(5):
        v = vmax * k / 4
        y = py0 - plot_h * k / 4
        out.append(f'<text x="{px0 - 6}" y="{y + 4:.1f}" text-anchor="end">{v / 1e6:.1f}M</text>')
        out.append(f'<line x1="{px0}" y1="{y:.1f}" x2="{px0 + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
    step = plot_w / (len(xs) - 1)
    for i, x in enumerate(xs):
        out.append(f'<text x="{px0 + i * step:.1f}" y="{py0 + 18}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{px0 + plot_w / 2:.1f}" y="{py0 + 34}" text-anchor="middle">clients</text>')
    for j, (label, values) in enumerate(series):
        color = COLORS[j % len(COLORS)]
        pts = " ".join(f"{px0 + i * step:.1f},{py0 - plot_h * v / vmax:.1f}" for i, v in enumerate(values))
        width_px = 3 if label.startswith("snowflake") else 1.5
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width_px}"/>')
        ly = y0 + 40 + j * 18
        out.append(f'<line x1="{px0 + plot_w + 15}" y1="{ly - 4}" x2="{px0 + plot_w + 35}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="{width_px}"/>')
        out.append(f'<text x="{px0 + plot_w + 40}" y="{ly}">{escape(label)}</text>')
    return out


def svg(meta, single, conc):
    width = 760
    bars, y = _bars(10, 10, width, f"{meta['server']}: ns per ID, one session", [
        (name, r["ns_per_id"]) for name, r in single.items()], "ns")
    clients = meta["clients"]
    series = [(gen, [by_c[c]["ids_per_s"] for c in clients]) for gen, by_c in conc["batch"].items()]
    lines = _lines(10, y + 20, width, 300, f"IDs per second, batches of {meta['batch']:,} (pgbench)", series, clients)
    height = y + 20 + 300 + 10
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="12">'
            '<style>.title{font-weight:bold;font-size:14px}</style>'
            f'<rect width="{width}" height="{height}" fill="white"/>')
    return head + "".join(bars + lines) + "</svg>\n"


def _series(scrapes, name, **labels):
    """(t, value) of the sample `name` with `labels` in each scrape that has it."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    out = []
    for s in scrapes:
        for key, value in s["samples"].items():
            if key.split("{")[0] == name and all(w in key for w in want):
                out.append((s["t"], value))
                break
    return out


def _per_second(points):
    return [(t1, max(v1 - v0, 0) / (t1 - t0)) for (t0, v0), (t1, v1) in zip(points, points[1:]) if t1 > t0]


def _holds(points, test, for_s=0):
    """Intervals of t where test(t, value) held, for at least for_s seconds first."""
    spans, since = [], None
    for t, v in points:
        if test(t, v):
            since = t if since is None else since
            if t - since >= for_s:
                if spans and spans[-1][1] is None:
                    continue
                spans.append([since + for_s, None])
        else:
            since = None
            if spans and spans[-1][1] is None:
                spans[-1][1] = t
    if spans and spans[-1][1] is None:
        spans[-1][1] = points[-1][0]
    return spans


def _increase_within(points, window_s):
    """Whether the counter rose within the window before each point (as increase() > 0)."""
    return lambda t, v: any(v > v0 for t0, v0 in points if t - window_s <= t0 < t)


def _panel(x0, y0, width, height, title, lines, t_max, phases, unit):
    """A time-series panel; lines are (label, color, [(t, v)], dashed)."""
    left, right = 60, 20
    plot_w, plot_h = width - left - right, height - 40
    px0, py0 = x0 + left, y0 + 25 + plot_h
    values = [v for _, _, pts, _ in lines for _, v in pts]
    vmin, vmax = min(values + [0]), max(values + [0])
    vmax = vmax + (vmax - vmin) * 0.1 or 1
    sx = lambda t: px0 + plot_w * t / t_max  # noqa: E731
    sy = lambda v: py0 - plot_h * (v - vmin) / (vmax - vmin)  # noqa: E731
    out = [f'<text x="{x0}" y="{y0 + 15}" class="title">{escape(title)}</text>']
    for i, (a, b, _) in enumerate(phases):
        if i % 2:
            out.append(f'<rect x="{sx(a):.1f}" y="{py0 - plot_h}" width="{sx(b) - sx(a):.1f}" height="{plot_h}" '
                       'fill="#f3f3f3"/>')
    out.append(f'<line x1="{px0}" y1="{py0}" x2="{px0 + plot_w}" y2="{py0}" stroke="#333"/>')
    for k in range(3):
        v = vmin + (vmax - vmin) * k / 2
        label = f"{v / 1000:,.0f}k" if abs(v) >= 10_000 else f"{v:,.3g}"
        out.append(f'<text x="{px0 - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{label}{unit}</text>')
        out.append(f'<line x1="{px0}" y1="{sy(v):.1f}" x2="{px0 + plot_w}" y2="{sy(v):.1f}" stroke="#ddd"/>')
    legend_x = px0 + 8
    for label, color, pts, dashed in lines:
        if not pts:
            continue
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        path = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{legend_x}" y="{y0 + 33}" fill="{color}">{escape(label)}</text>')
        legend_x += 7 * len(label) + 20
    return out, py0


def dashboard(recording):
    """The panels an operator would put on a dashboard of monitoring/queries.yaml,
    drawn from a recorded scrape, with the phases of the run shaded and where
    the conditions of monitoring/alerts.yml held."""
    scrapes, meta = recording["scrapes"], recording["meta"]
    phases = [(p["from_s"], p["to_s"], p["what"]) for p in meta["phases"]]
    t_max = phases[-1][1]
    width, height_panel = 760, 130
    ids = _per_second(_series(scrapes, "snowflake_id_ids_issued_total"))
    drift = _series(scrapes, "snowflake_id_drift_seconds")
    max_drift = _series(scrapes, "snowflake_id_max_clock_drift_seconds")
    waits = _per_second(_series(scrapes, "snowflake_id_clock_waits_total"))
    refused_total = [(s["t"], sum(v for k, v in s["samples"].items() if k.startswith("snowflake_id_refusals_total{")))
                     for s in scrapes]
    refused = _per_second(refused_total)
    steps = _series(scrapes, "snowflake_id_clock_step_backs_total")
    mark_age = [(s["t"], s["unix"] - v) for s, (_, v) in
                zip([s for s in scrapes if any(k.startswith("snowflake_id_high_water_mark_timestamp_seconds")
                                               for k in s["samples"])],
                    _series(scrapes, "snowflake_id_high_water_mark_timestamp_seconds"))]

    out, y = [], 10
    server = " ".join(meta["server"].split()[:2])
    out.append(f'<text x="10" y="{y + 15}" class="title">{escape(server)}, a scrape a second: max_clock_drift '
               f'{meta["settings"]["max_clock_drift"]}, max_wait {meta["settings"]["max_wait"]}</text>')
    y += 25
    for i, (a, b, what) in enumerate(phases):
        out.append(f'<text x="10" y="{y + 14 + 15 * i}">{a}–{b} s: {escape(what)}</text>')
    y += 15 * len(phases) + 10
    panels = [
        ("IDs issued per second", [("rate(ids_issued_total)", COLORS[0], ids, False)], ""),
        ("How far IDs run ahead of the clock", [("drift_seconds", COLORS[1], drift, False),
                                                ("max_clock_drift_seconds", "#333", max_drift, True),
                                                ("half of it (SnowflakeDriftHigh)", "#999",
                                                 [(t, v / 2) for t, v in max_drift], True)], " s"),
        ("Calls per second that waited for the clock, and that were refused",
         [("rate(clock_waits_total)", COLORS[2], waits, False),
          ("rate(refusals_total)", HIGHLIGHT, refused, False)], ""),
        ("Clock step backs counted", [("clock_step_backs_total", COLORS[4], steps, False)], ""),
        ("Age of the high-water mark (the scraper's clock less the mark)",
         [("time() - high_water_mark_timestamp_seconds", COLORS[5], mark_age, False)], " s"),
    ]
    for title, lines, unit in panels:
        part, bottom = _panel(10, y, width, height_panel, title, lines, t_max, phases, unit)
        out += part
        y = bottom + 15
    # Where the alert rules' conditions held (their windows and for: applied
    # to this recording; Prometheus's extrapolation aside).
    left = 60
    plot_w = width - left - 20
    sx = lambda t: 10 + left + plot_w * t / t_max  # noqa: E731
    out.append(f'<text x="10" y="{y + 15}" class="title">Where the conditions of monitoring/alerts.yml held</text>')
    y += 25
    rows = [
        ("SnowflakeCallsRefused", "critical", _holds(refused_total, _increase_within(refused_total, 300))),
        ("SnowflakeDriftHigh", "warning", _holds([(t, (v, m)) for (t, v), (_, m) in zip(drift, max_drift)],
                                                 lambda t, vm: vm[0] > 0.5 * vm[1], for_s=60)),
        ("SnowflakeClockSteppedBack", "warning", _holds(steps, _increase_within(steps, 600))),
    ]
    for name, severity, spans in rows:
        color = HIGHLIGHT if severity == "critical" else "#ff7f0e"
        out.append(f'<rect x="{sx(0):.1f}" y="{y}" width="{plot_w}" height="16" fill="#e8f5e9"/>')
        for a, b in spans:
            out.append(f'<rect x="{sx(a):.1f}" y="{y}" width="{max(sx(b) - sx(a), 1):.1f}" height="16" '
                       f'fill="{color}"/>')
        out.append(f'<text x="{sx(0) + 4:.1f}" y="{y + 13}" font-weight="bold">{name}</text>')
        y += 22
    for k in range(0, int(t_max) + 1, 20):
        out.append(f'<text x="{sx(k):.1f}" y="{y + 12}" text-anchor="middle">{k}</text>')
    out.append(f'<text x="{sx(t_max / 2):.1f}" y="{y + 28}" text-anchor="middle">seconds into the run; '
               'green: silent, orange: warning, red: critical</text>')
    height = y + 40
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="12">'
            '<style>.title{font-weight:bold;font-size:14px}</style>'
            f'<rect width="{width}" height="{height}" fill="white"/>')
    return head + "".join(out) + "</svg>\n"
