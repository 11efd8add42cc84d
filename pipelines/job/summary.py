"""The readable summary of ``duet run`` (rich tables on a console)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from pipelines.job.main_job import RunSummary

__all__ = ["print_summary"]

_MAX_DIFFS = 10


def print_summary(summary: RunSummary, console: Console) -> None:
    """Print ``summary``: throughput, lateness, batch, views (windows, checks, agreement),
    differences other than late-data exclusions, and the pipeline's highlights table."""
    from rich.table import Table

    s, b = summary.speed, summary.batch
    if s.latency_s:
        lat = s.latency_s
        lag = (f"p50 {lat.get('p50') or 0:.2f} s, p99 {lat.get('p99') or 0:.2f} s, max {lat.get('max') or 0:.2f} s "
               f"(live replay)")
    else:
        lag = "n/a" if s.lag_s is None else f"{s.lag_s:.1f} s (catching up on a backlog)"
    head = Table(title=f"duet run: {summary.pipeline}", show_header=False, title_justify="left")
    head.add_column("", style="bold")
    head.add_column("")
    head.add_row("records in", f"{summary.records_in:,}  (" + ", ".join(
        f"{t} {n:,}" for t, n in summary.records_in_by_topic.items()) + ")")
    instances = ""
    if s.instances > 1:
        placed = "; ".join(f"{', '.join(str(i) for i in subs)}" for subs in s.placement)
        instances = f" ({s.instances} instances, sub-topologies {placed})" if placed else f" ({s.instances} instances)"
    head.add_row("speed layer", f"{s.records_per_s:,.0f} records/s over {s.seconds:.1f} s{instances}, end-to-end lag "
                 f"{lag}")
    head.add_row("dropped as late", f"{s.dropped_late:,} record-window updates (Kafka's dropped-records; "
                 f"all drops {s.dropped:,})")
    if s.expired_join_drops:
        head.add_row("join expirations", f"[yellow]{s.expired_join_drops:,}[/] records a stream-stream join's window "
                     "store dropped as expired (their join results are missing; raise the join's grace)")
    head.add_row("dead-lettered", f"{s.dead_lettered:,}")
    during = ", during the speed phase" if b.during_speed else ""
    head.add_row("batch layer", f"{b.seconds:.1f} s{during}  (ingest {b.ingest_seconds:.1f} s, "
                 f"{sum(b.ingested.values()):,} records archived)")
    head.add_row("application.id", s.application_id)
    head.add_row("phases", ", ".join(f"{k} {v:.1f} s" for k, v in summary.phase_seconds.items()))
    console.print(head)

    views = Table(title="views", title_justify="left")
    for col in ("view", "windows", "checks", "agreement", "compared", "excluded (late)", "unexplained"):
        views.add_column(col, justify="left" if col in ("view", "checks") else "right")
    for view, n in summary.windows.items():
        ok = summary.checks.get(view)
        ratio = summary.agreement.get(view)
        views.add_row(
            view,
            f"{n:,}",
            "[green]passed[/]" if ok else f"[red]failed[/] {', '.join(summary.check_failures.get(view, []))}",
            "-" if ratio is None else (f"[green]{ratio:.2%}[/]" if ratio == 1.0 else f"[red]{ratio:.4%}[/]"),
            f"{summary.compared.get(view, 0):,}",
            f"{summary.excluded.get(view, 0):,}",
            _unexplained(summary.unexplained.get(view, 0)),
        )
    console.print(views)

    for view, diffs in summary.differences.items():
        t = Table(title=f"differences in {view} (not explained by late data)", title_justify="left")
        for col in ("key", "window_start", "window_end", "reason", "explained", "batch", "speed"):
            t.add_column(col)
        for d in diffs[:_MAX_DIFFS]:
            t.add_row(str(d["key"]), str(d["window_start"]), str(d["window_end"]), d["reason"],
                      "expired join" if d.get("explained") else "[red]no[/]", str(d["batch"])[:60], str(d["speed"])[:60])
        console.print(t)
        if len(diffs) > _MAX_DIFFS:
            console.print(f"... and {len(diffs) - _MAX_DIFFS} more")

    if summary.highlights is not None:
        hl = Table(title=summary.highlights.title, title_justify="left")
        for col in summary.highlights.columns:
            hl.add_column(col)
        for row in summary.highlights.rows:
            hl.add_row(*row)
        console.print(hl)
    verdict = "[bold green]OK[/]: every check passed and speed and batch agree" if summary.ok else (
        "[bold red]FAILED[/]: " + "; ".join(
            [f"checks failed: {[v for v, ok in summary.checks.items() if not ok]}"] * (not all(summary.checks.values()))
            + [f"disagreement: {[v for v, r in summary.agreement.items() if r != 1.0]}"]
            * (not all(r == 1.0 for r in summary.agreement.values()))
            + [f"differences no counted drop names: {[v for v, n in summary.unexplained.items() if n]}"]
            * any(summary.unexplained.values())
        )
    )
    console.print(verdict)


def _unexplained(n: int) -> str:
    """A view's count of differences no counted drop, late record, expired join record or
    dead letter names (``RunSummary.unexplained``): red unless 0."""
    return "[green]0[/]" if n == 0 else f"[red]{n:,}[/]"

