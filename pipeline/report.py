"""The fleet report: one self-contained HTML page from the pipeline's aggregated tables.

Owns: `render_report` (tables in, HTML text out) and `write_report`.

Rules kept here:
- Self-contained: inline CSS and inline SVG drawn here; no scripts, no external
  stylesheets, fonts or images, so the file opens offline and can be mailed around.
- Input is small, already-aggregated data the job collected (readiness rows, audit
  rows, error rows as plain dicts); the report never sees raw records and imports no
  Spark.
- Everything from the data is HTML-escaped.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

Row = Mapping[str, Any]

# Above this many clusters the per-cluster step charts become a compact table.
MAX_CLUSTER_CHARTS = 24
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.ok { color: #1a7f37; } .blocked { color: #b35900; } .bad { color: #c62828; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart { border: 1px solid #ddd; padding: 0.4em; }
.muted { color: #777; }
svg text { font-size: 11px; fill: #333; }
"""


def _text(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _verdict_class(verdict: str | None) -> str:
    if not verdict:
        return "muted"
    if verdict == "up to date" or (verdict.startswith("can upgrade") and "blocked" not in verdict):
        return "ok"
    if verdict.startswith("incompatible") or verdict.startswith("no "):
        return "bad"
    return "blocked"


def distribution_svg(counts: Sequence[tuple[str, int]], width: int = 640, bar_height: int = 22) -> str:
    """Horizontal bars: one per metadata.version, length proportional to its count."""
    if not counts:
        return '<p class="muted">No cluster has a finalized metadata.version.</p>'
    label_width, count_width = 110, 40
    top = max(count for _, count in counts)
    plot = width - label_width - count_width
    height = bar_height * len(counts) + 4
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for index, (label, count) in enumerate(counts):
        y = index * bar_height + 2
        length = max(1, round(plot * count / top))
        parts.append(f'<text x="0" y="{y + bar_height * 0.7:.1f}">{_text(label)}</text>')
        parts.append(
            f'<rect x="{label_width}" y="{y + 3}" width="{length}" height="{bar_height - 6}" fill="#4a7bd0">'
            f"<title>{_text(label)}: {count}</title></rect>"
        )
        parts.append(f'<text x="{label_width + length + 4}" y="{y + bar_height * 0.7:.1f}">{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


def step_svg(points: Sequence[tuple[int, int, str]], width: int = 320, height: int = 110) -> str:
    """A step chart of (offset, level, version name) points in offset order: the level
    holds until the next change. Lossy downgrades are not marked here (see the table)."""
    if not points:
        return '<p class="muted">no metadata.version records</p>'
    left, right, top, bottom = 8, 70, 10, 20
    offsets = [offset for offset, _, _ in points]
    levels = [level for _, level, _ in points]
    low_x, high_x = min(offsets), max(offsets)
    low_y, high_y = min(levels), max(levels)
    span_x = max(1, high_x - low_x)
    span_y = max(1, high_y - low_y)

    def x(offset: int) -> float:
        return left + (width - left - right) * (offset - low_x) / span_x

    def y(level: int) -> float:
        return top + (height - top - bottom) * (1 - (level - low_y) / span_y)

    path = [f"M{x(points[0][0]):.1f},{y(points[0][1]):.1f}"]
    for offset, level, _ in points[1:]:
        path.append(f"H{x(offset):.1f}V{y(level):.1f}")
    path.append(f"H{width - right:.1f}")
    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f'<path d="{"".join(path)}" fill="none" stroke="#4a7bd0" stroke-width="2"/>']
    for offset, level, name in points:
        parts.append(
            f'<circle cx="{x(offset):.1f}" cy="{y(level):.1f}" r="3" fill="#4a7bd0">'
            f"<title>offset {offset}: {_text(name)} (level {level})</title></circle>"
        )
    shown = {level: name for _, level, name in points}
    for level in sorted(shown):
        parts.append(f'<text x="{width - right + 4}" y="{y(level) + 4:.1f}">{_text(shown[level])}</text>')
    parts.append(f'<text x="{left}" y="{height - 4}">offset {low_x}</text>')
    parts.append(f'<text x="{width - right}" y="{height - 4}" text-anchor="end">{high_x}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _blockers(blockers: Sequence[Row] | None) -> str:
    if not blockers:
        return '<span class="muted">none</span>'
    return "<br>".join(
        f"{_text(b.get('role'))} {_text(b.get('node_id'))} (release {_text(b.get('release'))}, "
        f"mv {_text(b.get('mv_min'))}-{_text(b.get('mv_max'))})"
        for b in blockers
    )


def render_report(
    readiness: Sequence[Row],
    audit: Sequence[Row],
    errors: Sequence[Row],
    *,
    title: str = "kraftwerk fleet report",
    fleet: str | None = None,
) -> str:
    """The report's HTML. `readiness`, `audit`, `errors`: rows of the pipeline tables of
    the same names, as dicts (nested structs as dicts too)."""
    readiness = sorted(readiness, key=lambda r: str(r.get("cluster")))
    mv_audit = sorted(
        (r for r in audit if r.get("feature") == "metadata.version"),
        key=lambda r: (str(r.get("cluster")), r.get("offset") or 0),
    )

    versions = Counter(
        (r.get("metadata_version_level"), r.get("metadata_version"))
        for r in readiness
        if r.get("metadata_version_level") is not None
    )
    distribution = [(name, count) for (_, name), count in sorted(versions.items(), key=lambda item: item[0][0])]

    sections = [f"<h1>{escape(title)}</h1>"]
    summary = f"{len(readiness)} clusters"
    if fleet:
        summary = f"fleet {_text(fleet)}: " + summary
    error_total = sum(int(r.get("errors") or 0) for r in errors)
    summary += f", {error_total} unreadable batches"
    sections.append(f'<p class="muted">{summary}</p>')

    sections.append("<h2>metadata.version across the fleet</h2>")
    sections.append(distribution_svg(distribution))

    sections.append("<h2>Upgrade readiness</h2>")
    sections.append(
        "<p class=\"muted\">supported: the highest metadata.version every registered broker (and every "
        "controller of known release) supports; target: the highest the newest software in the cluster "
        "supports; blockers: nodes below the target.</p>"
    )
    sections.append(
        _table(
            ["cluster", "cluster id", "metadata.version", "other features", "brokers", "supported", "target",
             "blockers", "verdict"],
            (
                [
                    _text(r.get("cluster")),
                    _text(r.get("cluster_id")),
                    f"{_text(r.get('metadata_version'))} ({_text(r.get('metadata_version_level'))})",
                    _text(", ".join(f"{k}={v}" for k, v in sorted((r.get("other_features") or {}).items()))),
                    _text(r.get("broker_count")),
                    _text(r.get("supported_mv")),
                    _text(r.get("target_mv")),
                    _blockers(r.get("blockers")),
                    f'<span class="{_verdict_class(r.get("verdict"))}">{_text(r.get("verdict"))}</span>',
                ]
                for r in readiness
            ),
        )
    )

    sections.append("<h2>metadata.version timeline per cluster</h2>")
    by_cluster: dict[str, list[Row]] = {}
    for r in mv_audit:
        by_cluster.setdefault(str(r.get("cluster")), []).append(r)
    cluster_names = [str(r.get("cluster")) for r in readiness] or sorted(by_cluster)
    if len(cluster_names) <= MAX_CLUSTER_CHARTS:
        charts = []
        for name in cluster_names:
            points = [(int(r["offset"]), int(r["new_level"]), str(r.get("new_version"))) for r in by_cluster.get(name, [])]
            charts.append(f'<div class="chart"><strong>{_text(name)}</strong><br>{step_svg(points)}</div>')
        sections.append(f'<div class="charts">{"".join(charts)}</div>')
    else:
        sections.append(
            _table(
                ["cluster", "changes", "history"],
                (
                    [
                        _text(name),
                        _text(len(by_cluster.get(name, []))),
                        " &rarr; ".join(_text(r.get("new_version")) for r in by_cluster.get(name, [])),
                    ]
                    for name in cluster_names
                ),
            )
        )
    sections.append("<h3>Changes</h3>")
    sections.append(
        _table(
            ["cluster", "offset", "time", "from", "to", "direction", "lossy"],
            (
                [
                    _text(r.get("cluster")),
                    _text(r.get("offset")),
                    _text(r.get("timestamp")),
                    _text(r.get("old_version")),
                    _text(r.get("new_version")),
                    _text(r.get("direction")),
                    '<span class="bad">lossy</span>' if r.get("lossy") else "",
                ]
                for r in mv_audit
            ),
        )
    )

    sections.append("<h2>Unreadable batches</h2>")
    if errors:
        sections.append(
            _table(
                ["cluster", "node", "source", "file", "errors", "first error"],
                (
                    [_text(r.get("cluster")), _text(r.get("node_id")), _text(r.get("source")), _text(r.get("file")),
                     _text(r.get("errors")), _text(r.get("first_error"))]
                    for r in sorted(errors, key=lambda r: (str(r.get("cluster")), str(r.get("file"))))
                ),
            )
        )
    else:
        sections.append('<p class="ok">none</p>')

    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def write_report(path: Path, readiness: Sequence[Row], audit: Sequence[Row], errors: Sequence[Row],
                 **options: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(readiness, audit, errors, **options), encoding="utf-8")
    return path
