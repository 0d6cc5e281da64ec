"""A two-panel SVG chart of a benchmark run, without plotting libraries."""

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
