#!/usr/bin/env python3
"""Report of Experiment D (sustained writes), from benchmarks/sustained_writes.sh.

Usage: sustained_report.py RESULTS_DIR NAME

Reads RESULTS_DIR/NAME-raw/ (machine.txt, preload.json, overwrite.json: a
`larder bench --json --interval` report, overwrite-start.txt, samples.jsonl:
one JSON object per disk/stats sample) and writes RESULTS_DIR/NAME.json,
RESULTS_DIR/NAME.md and RESULTS_DIR/NAME.svg. Standard library only.

Targets:
- throughput: the last minute's ops/s within 10% of the first minute's
  (|last / first - 1| <= 0.10). Runs shorter than two minutes compare their
  first and last halves instead, and say so.
- disk: the data directory's disk use (du, allocated bytes) at most 2x the
  live data at every sample, where live data is KEYS x record size: the
  28-byte record header plus key plus value, for every key (Larder's record
  layout, crates/engine/src/record.rs). The server's own `larder_live_bytes`
  is shown beside it as a cross-check.

Trend: a straight line fitted to the intervals' rates (least squares
against each interval's middle), read at the middles of the first and last
windows, with its slope per 10 minutes and two standard errors of the
slope. The errors take the intervals as independent; a host whose speed
wanders over minutes makes neighbouring intervals alike, so the real
uncertainty is larger. Beside the target, which compares two windows, it
tells a drift through the whole run from two windows that happened to
differ.

CPU: where samples.jsonl carries CPU ticks (the machine's from /proc/stat,
the server's and the load generator's from /proc/PID/stat), each interval
gets the vCPUs that the server, the load generator and the host's steal took
during it, and the slow intervals (below 90% of the median interval) are
compared with the others, so that a dip can be put down to the server or to
the machine.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from html import escape
from pathlib import Path

# Reuse report.py's helpers without leaving a __pycache__ in the tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import fmt_ops, fmt_us, read_machine  # noqa: E402  (reused helpers)

RECORD_HEADER_BYTES = 28
WINDOW_SECONDS = 60.0
THROUGHPUT_TOLERANCE = 0.10
DISK_RATIO_MAX = 2.0


def fmt_bytes(x: float | None) -> str:
    if x is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(x) >= size:
            return f"{x / size:.1f} {unit}"
    return f"{x:.0f} B"


def live_data_bytes(keys: int, prefix_bytes: int, value_bytes: int) -> int:
    """KEYS x record size: header + key ("prefix" + decimal id) + value, summed
    over ids 0..keys-1 (ids have different digit counts)."""
    total = 0
    low, digits = 0, 1
    while low < keys:
        high = min(keys, 10**digits)
        count = high - low
        total += count * (RECORD_HEADER_BYTES + prefix_bytes + digits + value_bytes)
        low, digits = high, digits + 1
    return total


def window_rate(intervals: list[dict], start: float, end: float) -> dict:
    """Throughput over the intervals lying within [start, end] (a little slack
    for the last interval, which runs to the last reply)."""
    inside = [i for i in intervals if i["start_seconds"] >= start - 1e-6 and i["end_seconds"] <= end + 1.0]
    requests = sum(i["requests"] for i in inside)
    seconds = sum(i["end_seconds"] - i["start_seconds"] for i in inside)
    return {
        "from_seconds": start,
        "to_seconds": end,
        "intervals": len(inside),
        "requests": requests,
        "seconds": seconds,
        "ops_per_second": requests / seconds if seconds > 0 else 0.0,
    }


def throughput_target(intervals: list[dict], duration: float) -> dict:
    window = WINDOW_SECONDS if duration >= 2 * WINDOW_SECONDS else duration / 2
    first = window_rate(intervals, 0.0, window)
    last = window_rate(intervals, duration - window, duration)
    ratio = last["ops_per_second"] / first["ops_per_second"] if first["ops_per_second"] else None
    met = ratio is not None and abs(ratio - 1.0) <= THROUGHPUT_TOLERANCE
    if window == WINDOW_SECONDS:
        target = "last minute's throughput within 10% of the first minute's"
    else:
        target = (f"last {window:g} s's throughput within 10% of the first {window:g} s's "
                  "(the run is shorter than 2 minutes: halves, not minutes)")
    return {
        "target": target,
        "window_seconds": window,
        "first": first,
        "last": last,
        "ratio": ratio,
        "met": met,
        "value": (
            f"first {fmt_ops(first['ops_per_second'])} ops/s, last {fmt_ops(last['ops_per_second'])} ops/s "
            f"({ratio:.3f}x)" if ratio is not None else "no requests in the first window"
        ),
    }


def throughput_trend(intervals: list[dict], window: float, duration: float) -> dict | None:
    """The least-squares line through the intervals' rates against their
    middles: its rate at the middles of the first and last windows of
    `window` seconds, their ratio, and its slope per 10 minutes with two
    standard errors, both as a share of the mean rate. None with fewer than
    three intervals, no spread in time, no requests, or a line that is not
    above zero at the first window's middle (no ratio to give)."""
    times = [(i["start_seconds"] + i["end_seconds"]) / 2 for i in intervals]
    rates = [i["ops_per_second"] for i in intervals]
    n = len(times)
    if n < 3 or len(set(times)) < 2:
        return None
    mean_rate = statistics.fmean(rates)
    if mean_rate <= 0:
        return None
    slope, intercept = statistics.linear_regression(times, rates)
    sxx = (n - 1) * statistics.variance(times)
    residuals = [r - (intercept + slope * t) for t, r in zip(times, rates)]
    slope_se = math.sqrt(sum(e * e for e in residuals) / (n - 2) / sxx)
    first = intercept + slope * window / 2
    last = intercept + slope * (duration - window / 2)
    if first <= 0:
        return None
    per_10_min = 600.0 / mean_rate
    return {
        "intervals": n,
        "first_ops_per_second": first,
        "last_ops_per_second": last,
        "ratio": last / first,
        "slope_share_per_10_minutes": slope * per_10_min,
        "slope_share_per_10_minutes_2se": 2 * slope_se * per_10_min,
    }


def disk_target(samples: list[dict], live_bytes: int) -> dict:
    measured = [s for s in samples if s.get("du_bytes") is not None]
    peak = max(measured, key=lambda s: s["du_bytes"], default=None)
    ratio = peak["du_bytes"] / live_bytes if peak and live_bytes else None
    last = measured[-1] if measured else None
    return {
        "target": "disk use <= 2x live data (live data = KEYS x record size), at every sample",
        "live_bytes": live_bytes,
        "peak_du_bytes": peak["du_bytes"] if peak else None,
        "peak_at_seconds": peak["t"] if peak else None,
        "peak_ratio": ratio,
        "final_du_bytes": last["du_bytes"] if last else None,
        "final_ratio": last["du_bytes"] / live_bytes if last and live_bytes else None,
        "met": ratio is not None and ratio <= DISK_RATIO_MAX,
        "value": (
            f"peak {fmt_bytes(peak['du_bytes'])} at {peak['t']:.0f} s = {ratio:.2f}x of {fmt_bytes(live_bytes)}"
            if ratio is not None else "no disk samples"
        ),
    }


# ------------------------------------------------------------------- CPU
SLOW_FRACTION = 0.9
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cumulative_at(points: list[tuple[float, float]], t: float, slack: float = 1.0) -> float | None:
    """A cumulative counter at time t, interpolated between the samples around
    it; None outside the sampled span (give or take `slack` seconds)."""
    if not points or t < points[0][0] - slack or t > points[-1][0] + slack:
        return None
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def cpu_by_interval(intervals: list[dict], samples: list[dict], ticks_per_second: float) -> list[dict | None]:
    """Per interval: vCPUs used by the server and the load generator, vCPUs
    stolen by the host, and vCPUs idle (idle + iowait), from the cumulative
    tick counts interpolated at the interval's ends. None where the samples
    do not cover the interval or carry no CPU figures."""
    def series(value_of) -> list[tuple[float, float]]:
        out = []
        for smp in samples:
            value = value_of(smp)
            if value is not None:
                out.append((smp["t"], float(value)))
        return out

    machine = {f: series(lambda smp, f=f: (smp.get("cpu_ticks") or {}).get(f)) for f in CPU_FIELDS}
    server = series(lambda smp: smp.get("server_cpu_ticks"))
    client = series(lambda smp: smp.get("client_cpu_ticks"))

    def used(points, start, end) -> float | None:
        a, b = cumulative_at(points, start), cumulative_at(points, end)
        return (b - a) / ticks_per_second / (end - start) if a is not None and b is not None else None

    rows = []
    for i in intervals:
        start, end = i["start_seconds"], i["end_seconds"]
        if end <= start or ticks_per_second <= 0:
            rows.append(None)
            continue
        each = {f: used(machine[f], start, end) for f in CPU_FIELDS}
        if any(v is None for v in each.values()):
            rows.append(None)
            continue
        rows.append({
            "server_vcpus": used(server, start, end),
            "client_vcpus": used(client, start, end),
            "steal_vcpus": each["steal"],
            "idle_vcpus": each["idle"] + each["iowait"],
            "machine_vcpus": sum(each.values()),
        })
    return rows


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def slow_interval_summary(intervals: list[dict], cpu: list[dict | None]) -> dict | None:
    """The intervals below SLOW_FRACTION x the median interval's ops/s, and the
    mean CPU figures in them against the other intervals."""
    rates = sorted(i["ops_per_second"] for i in intervals)
    if not rates or not any(c is not None for c in cpu):
        return None
    median = rates[len(rates) // 2] if len(rates) % 2 else (rates[len(rates) // 2 - 1] + rates[len(rates) // 2]) / 2
    slow = [k for k, i in enumerate(intervals) if i["ops_per_second"] < SLOW_FRACTION * median]

    def averages(indexes: list[int]) -> dict:
        rows = [cpu[k] for k in indexes if cpu[k] is not None]
        return {
            "intervals": len(indexes),
            "ops_per_second": mean([intervals[k]["ops_per_second"] for k in indexes]),
            **{field: mean([r[field] for r in rows if r[field] is not None])
               for field in ("server_vcpus", "client_vcpus", "steal_vcpus", "idle_vcpus")},
        }

    return {
        "median_ops_per_second": median,
        "slow_below_ops_per_second": SLOW_FRACTION * median,
        "slow_indexes": slow,
        "slow": averages(slow),
        "others": averages([k for k in range(len(intervals)) if k not in slow]),
    }


def fmt_vcpus(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


# ----------------------------------------------------------------- chart
def nice_step(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 (times a power of ten) at least x."""
    if x <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(x))
    for step in (1, 2, 2.5, 5, 10):
        if x <= step * exp * (1 + 1e-9):
            return step * exp
    return 10 * exp


def axis(label: str, largest: float, fmt, unit: float = 1.0) -> dict:
    """A y axis from 0 with at most four steps covering `largest`, each step a
    round number of `unit`s."""
    largest = max(largest, 1e-9)
    step = nice_step(largest / unit / 4) * unit
    return {"label": label, "step": step, "max": step * math.ceil(largest / step - 1e-9), "fmt": fmt}


def panel(out: list, x0: float, y0: float, w: float, h: float, title: str, x_max: float,
          left: dict, right: dict | None, series: list[dict]) -> None:
    """A line panel: series drawn against the left or right axis.
    left/right: {"label", "max", "fmt"}; series: {"points", "color", "axis",
    "label", optional "dash"}."""
    out.append(f'<text x="{x0}" y="{y0 - 8}" font-weight="bold">{escape(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')

    def sx(t: float) -> float:
        return x0 + (t / x_max) * w if x_max > 0 else x0

    def sy(v: float, axis: dict) -> float:
        return y0 + h - (v / axis["max"]) * h if axis["max"] > 0 else y0 + h

    for side, ax in (("left", left), ("right", right)):
        if ax is None:
            continue
        ticks = round(ax["max"] / ax["step"])
        for k in range(ticks + 1):
            value = ax["step"] * k
            y = sy(value, ax)
            if side == "left":
                out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#eee"/>')
                out.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
                           f'{escape(ax["fmt"](value))}</text>')
            else:
                out.append(f'<text x="{x0 + w + 4}" y="{y + 4:.1f}" font-size="10">{escape(ax["fmt"](value))}</text>')
    x_step = nice_step(x_max / 6)
    t = 0.0
    while t <= x_max + 1e-9:
        out.append(f'<text x="{sx(t):.1f}" y="{y0 + h + 14}" text-anchor="middle" font-size="10">{t:g} s</text>')
        t += x_step
    for s in series:
        axis = left if s["axis"] == "left" else right
        pts = [(sx(t), sy(v, axis)) for t, v in s["points"] if v is not None]
        if not pts:
            continue
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{s["color"]}" stroke-width="2"{dash}/>')
        if len(pts) == 1:
            out.append(f'<circle cx="{pts[0][0]:.1f}" cy="{pts[0][1]:.1f}" r="3" fill="{s["color"]}"/>')
    # The legend goes under the time axis, where it cannot hide a line.
    lx, ly = x0, y0 + h + 34
    for s in series:
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 16}" y2="{ly - 4}" stroke="{s["color"]}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 20}" y="{ly}" font-size="11">{escape(s["label"])}</text>')
        lx += 28 + 6.5 * len(s["label"])
    out.append(f'<text x="{x0 - 48}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 - 48} {y0 + h / 2})" '
               f'text-anchor="middle">{escape(left["label"])}</text>')
    if right:
        out.append(f'<text x="{x0 + w + 52}" y="{y0 + h / 2}" font-size="11" '
                   f'transform="rotate(90 {x0 + w + 52} {y0 + h / 2})" text-anchor="middle">{escape(right["label"])}</text>')


def chart_svg(title: str, intervals: list[dict], samples: list[dict], live_bytes: int,
              cpu: list[dict | None], nproc: float) -> str:
    width, left_pad, plot_w, ph, gap = 860, 80, 700, 220, 90
    panels = 3 if any(c is not None for c in cpu) else 2
    height = 60 + panels * (ph + gap)
    x_max = max([i["end_seconds"] for i in intervals] + [s["t"] for s in samples] + [1.0])
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    mid = [((i["start_seconds"] + i["end_seconds"]) / 2) for i in intervals]
    ops = axis("ops/s", max([i["ops_per_second"] for i in intervals] + [1]), fmt_ops)
    p99 = axis("p99 latency", max([i["p99_us"] for i in intervals] + [1]), fmt_us)
    panel(out, left_pad, 60, plot_w, ph, "Overwrite throughput and p99 latency per interval", x_max, ops, p99, [
        {"points": list(zip(mid, [i["ops_per_second"] for i in intervals])), "color": "#2e7d32", "axis": "left",
         "label": "ops/s (left)"},
        {"points": list(zip(mid, [i["p99_us"] for i in intervals])), "color": "#e45756", "axis": "right",
         "label": "p99 (right)"},
    ])
    top = max([s.get("du_bytes") or 0 for s in samples] + [s.get("larder_dead_bytes") or 0 for s in samples]
              + [2 * live_bytes])
    disk = axis("bytes", top, fmt_bytes, unit=(1 << 30) if top >= 4 << 30 else (1 << 20))
    t = [s["t"] for s in samples]
    panel(out, left_pad, 60 + ph + gap, plot_w, ph, "Data directory disk use and dead bytes", x_max, disk, None, [
        {"points": list(zip(t, [s.get("du_bytes") for s in samples])), "color": "#4c78a8", "axis": "left",
         "label": "du"},
        {"points": list(zip(t, [s.get("larder_dead_bytes") for s in samples])), "color": "#f58518",
         "axis": "left", "label": "dead bytes"},
        {"points": [(0, live_bytes), (x_max, live_bytes)], "color": "#54a24b", "axis": "left",
         "label": "live data", "dash": "6,4"},
        {"points": [(0, 2 * live_bytes), (x_max, 2 * live_bytes)], "color": "#b22222", "axis": "left",
         "label": "2x live (target)", "dash": "2,3"},
    ])
    if panels == 3:
        def line(field: str) -> list:
            return [(t, c[field] if c else None) for t, c in zip(mid, cpu)]
        vcpus = axis("vCPUs", max([nproc] + [c["machine_vcpus"] for c in cpu if c]), lambda v: f"{v:g}", unit=0.25)
        panel(out, left_pad, 60 + 2 * (ph + gap), plot_w, ph, "CPU per interval (vCPUs busy)", x_max, vcpus, None, [
            {"points": line("server_vcpus"), "color": "#2e7d32", "axis": "left", "label": "server"},
            {"points": line("client_vcpus"), "color": "#4c78a8", "axis": "left", "label": "load generator"},
            {"points": line("steal_vcpus"), "color": "#e45756", "axis": "left", "label": "stolen by the host"},
            {"points": line("idle_vcpus"), "color": "#999999", "axis": "left", "label": "idle", "dash": "4,3"},
        ])
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ main
def load_samples(raw: Path, start: float) -> list[dict]:
    samples = []
    path = raw / "samples.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line:
                sample = json.loads(line)
                sample["t"] = sample["time"] - start
                samples.append(sample)
    samples.sort(key=lambda s: s["t"])
    return samples


def build(results_dir: Path, name: str) -> dict:
    raw = results_dir / f"{name}-raw"
    machine = read_machine(raw)
    with (raw / "overwrite.json").open() as f:
        bench = json.load(f)
    preload = None
    if (raw / "preload.json").exists():
        with (raw / "preload.json").open() as f:
            preload = json.load(f).get("preload")
    start = float((raw / "overwrite-start.txt").read_text().strip())
    samples = load_samples(raw, start)
    settings = bench["settings"]
    intervals = bench.get("intervals") or []
    if settings["value_bytes_min"] != settings["value_bytes_max"]:
        raise SystemExit("values of varying size: live data cannot be computed as KEYS x record size")
    prefix_bytes = len(machine.get("key_prefix", "key:"))
    live = live_data_bytes(settings["key_count"], prefix_bytes, settings["value_bytes_max"])
    duration = settings["duration_seconds"] or bench["measured_seconds"]
    server_live = [s["larder_live_bytes"] for s in samples if s.get("larder_live_bytes") is not None]
    ticks_per_second = float(machine.get("clock_ticks_per_second", "100"))
    cpu = cpu_by_interval(intervals, samples, ticks_per_second)
    throughput = throughput_target(intervals, duration)
    for interval, figures in zip(intervals, cpu):
        interval["cpu"] = figures
    return {
        "machine": machine,
        "settings": settings,
        "preload": preload,
        "overall": {
            "measured_seconds": bench["measured_seconds"],
            "requests": bench["requests"],
            "ops_per_second": bench["ops_per_second"],
            "errors": bench["errors"],
            "failed_connections": bench["failed_connections"],
            "first_failure": bench.get("first_failure"),
            "latency_us": bench["latency"]["all"],
        },
        "live_data": {
            "definition": "KEYS x record size (28-byte header + key + value per key)",
            "bytes": live,
            "server_live_bytes_first": server_live[0] if server_live else None,
            "server_live_bytes_last": server_live[-1] if server_live else None,
        },
        "intervals": intervals,
        "slow_intervals": slow_interval_summary(intervals, cpu),
        "samples": samples,
        "targets": [throughput, disk_target(samples, live)],
        "trend": throughput_trend(intervals, throughput["window_seconds"], duration),
    }


def markdown(doc: dict, name: str) -> str:
    m, s, o = doc["machine"], doc["settings"], doc["overall"]
    live = doc["live_data"]
    md = [f"# Experiment D: sustained writes ({m.get('date', 'undated')})", ""]
    md += [
        f"Larder (`--durability everysec`) preloaded with {s['key_count']:,} keys of {s['value_bytes_max']}-byte "
        f"values, then 100% overwrites of uniformly chosen keys of the same set for {s['duration_seconds']:g} s, "
        f"{s['connections']} connections, pipeline {s['pipeline']}; throughput and latency per "
        f"{s.get('interval_seconds', 0):g} s interval (latency from when each request was due), disk use (du of "
        "the data directory, allocated bytes) and the server's `stats` sampled alongside.",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for t in doc["targets"]:
        md.append(f"| {t['target']} | {t['value']} | {'yes' if t['met'] else '**no**'} |")
    ratio = doc["targets"][0]["ratio"]
    if ratio is not None and ratio > 1 + THROUGHPUT_TOLERANCE:
        md += ["", "The throughput target is missed because the last window was *faster* than the first, "
                   "not slower."]
    md += trend_markdown(doc.get("trend"), doc["targets"][0]["window_seconds"])
    md += [
        "",
        f"Live data is defined as KEYS x record size = {live['bytes']:,} bytes ({fmt_bytes(live['bytes'])}): "
        f"Larder's 28-byte record header plus key plus value, for every key. The server's own "
        f"`larder_live_bytes` was {fmt_bytes(live['server_live_bytes_first'])} at the first sample and "
        f"{fmt_bytes(live['server_live_bytes_last'])} at the last. Disk use is `du -s -B1` of the data "
        "directory (segments, hint files and anything else in it), sampled every "
        f"{float(m.get('sample_interval', 'nan')):g} s: a peak between two samples is not seen.",
        "",
        "## Machine and command",
        "",
    ]
    for key in ("nproc", "memory", "cpu", "kernel", "work_dir_fs", "disks", "larder", "io_larder", "settings"):
        if key in m:
            md.append(f"- {key}: `{m[key]}`")
    md += ["", "Commands:", "", "```sh", m.get("invocation", "").strip()]
    for key in ("server_command", "preload_command", "overwrite_command"):
        if key in m:
            md.append(m[key].strip())
    md += ["```", ""]
    if "server_config" in m:
        md += [f"Server config file: `{m['server_config']}`", ""]
    lat = o["latency_us"]
    pre = doc["preload"]
    md += [
        "## Whole run",
        "",
        f"- preload: {pre['keys']:,} keys in {pre['seconds']:.1f} s" if pre else "- preload: n/a",
        f"- overwrites: {o['requests']:,} in {o['measured_seconds']:.1f} s = {fmt_ops(o['ops_per_second'])} ops/s; "
        f"errors {o['errors']}, failed connections {o['failed_connections']}",
        f"- latency: p50 {fmt_us(lat['p50_us'])}, p99 {fmt_us(lat['p99_us'])}, p99.9 {fmt_us(lat['p999_us'])}, "
        f"max {fmt_us(lat['max_us'])}",
        "",
        f"![sustained writes]({name}.svg)",
        "",
    ]
    md += slow_interval_markdown(doc.get("slow_intervals"))
    # Runs sampled before the sampler recorded CPU time have no CPU columns.
    with_cpu = any(i.get("cpu") for i in doc["intervals"])
    md += ["## Intervals", ""]
    if with_cpu:
        md += [
            "CPU columns are vCPUs busy during the interval (1.00 = one vCPU the whole time): the server's and "
            "the load generator's user + system time, and the time the host stole from this machine.",
            "",
            "| # | seconds | requests | ops/s | p50 | p99 | max | server CPU | load generator CPU | stolen |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        md += ["| # | seconds | requests | ops/s | p50 | p99 | max |", "|---:|---|---:|---:|---:|---:|---:|"]
    for i in doc["intervals"]:
        row = (f"| {i['index']} | {i['start_seconds']:.1f}-{i['end_seconds']:.1f} | {i['requests']:,} | "
               f"{i['ops_per_second']:,.0f} | {fmt_us(i['p50_us'])} | {fmt_us(i['p99_us'])} | {fmt_us(i['max_us'])} |")
        if with_cpu:
            c = i.get("cpu") or {}
            row += (f" {fmt_vcpus(c.get('server_vcpus'))} | {fmt_vcpus(c.get('client_vcpus'))} | "
                    f"{fmt_vcpus(c.get('steal_vcpus'))} |")
        md.append(row)
    md += [
        "",
        "## Disk and server samples",
        "",
        "Time is seconds since the overwrite phase was launched.",
        "",
        "| t (s) | du | du / live | larder_live_bytes | larder_dead_bytes | segments | compactions "
        "| compaction written | items |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for smp in doc["samples"]:
        du = smp.get("du_bytes")
        ratio_text = f"{du / live['bytes']:.2f}x" if du is not None and live["bytes"] else "n/a"
        md.append(
            f"| {smp['t']:.1f} | {fmt_bytes(du)} | {ratio_text} | {fmt_bytes(smp.get('larder_live_bytes'))} | "
            f"{fmt_bytes(smp.get('larder_dead_bytes'))} | {smp.get('larder_segments')} | "
            f"{smp.get('larder_compactions')} | {fmt_bytes(smp.get('larder_compaction_bytes_written'))} | "
            f"{smp.get('curr_items')} |"
        )
    md.append("")
    return "\n".join(md)


def trend_markdown(trend: dict | None, window: float) -> list[str]:
    if trend is None:
        return []
    return [
        "",
        f"Trend: a straight line fitted to the {trend['intervals']} intervals' rates (least squares) runs from "
        f"{fmt_ops(trend['first_ops_per_second'])} ops/s at the middle of the first {window:g} s to "
        f"{fmt_ops(trend['last_ops_per_second'])} at the middle of the last ({trend['ratio']:.3f}x), a slope of "
        f"{100 * trend['slope_share_per_10_minutes']:+.1f}% of the mean rate per 10 minutes, "
        f"± {100 * trend['slope_share_per_10_minutes_2se']:.1f}% (two standard errors, taking the intervals as "
        "independent; a host whose speed wanders over minutes makes the real uncertainty larger).",
    ]


def slow_interval_markdown(summary: dict | None) -> list[str]:
    if summary is None:
        return []
    md = ["## Slow intervals and CPU", ""]
    slow, others = summary["slow"], summary["others"]
    if not summary["slow_indexes"]:
        md += [f"No interval was below {SLOW_FRACTION:.0%} of the median interval "
               f"({fmt_ops(summary['median_ops_per_second'])} ops/s).", ""]
        return md
    md += [
        f"{slow['intervals']} of {slow['intervals'] + others['intervals']} intervals were below "
        f"{SLOW_FRACTION:.0%} of the median interval ({fmt_ops(summary['median_ops_per_second'])} ops/s): "
        + ", ".join(f"#{k}" for k in summary["slow_indexes"]) + ". Mean figures in them against the others:",
        "",
        "| intervals | ops/s | server CPU | load generator CPU | stolen by the host | idle |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in (("slow", slow), ("others", others)):
        md.append(f"| {label} ({row['intervals']}) | {fmt_ops(row['ops_per_second'])} | "
                  f"{fmt_vcpus(row['server_vcpus'])} | {fmt_vcpus(row['client_vcpus'])} | "
                  f"{fmt_vcpus(row['steal_vcpus'])} | {fmt_vcpus(row['idle_vcpus'])} |")
    md += ["", "CPU figures are vCPUs busy on average (user + system time; stolen: the host's steal time; "
           "idle: idle + iowait).", ""]
    return md


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    results_dir, name = Path(sys.argv[1]), sys.argv[2]
    raw = results_dir / f"{name}-raw"
    if not (raw / "overwrite.json").exists():
        print(f"no overwrite.json in {raw}", file=sys.stderr)
        return 1
    doc = build(results_dir, name)
    (results_dir / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    title = (f"Sustained overwrites: {doc['settings']['key_count']:,} keys, "
             f"{doc['settings']['value_bytes_max']} B values, durability everysec")
    (results_dir / f"{name}.svg").write_text(
        chart_svg(title, doc["intervals"], doc["samples"], doc["live_data"]["bytes"],
                  [i.get("cpu") for i in doc["intervals"]], float(doc["machine"].get("nproc", "1"))))
    (results_dir / f"{name}.md").write_text(markdown(doc, name))
    for t in doc["targets"]:
        print(f"{'met' if t['met'] else 'NOT met'}: {t['target']}: {t['value']}")
    print(f"wrote {results_dir / (name + '.json')}, {name}.md and {name}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
