"""``duet serve`` and ``duet query``: the merged views over HTTP and on the command line.

Both read the published serving tables of the pipeline's lake and, given Kafka bootstrap
servers, merge the speed layer's view topics after the batch watermark
(docs/live-serving.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pipelines.cli.support import (
    LakeOpt, PipelineOpt, app, external_bootstrap, make_console, pipeline_and_lake, setup_logging, user_errors,
)

ViewTopicsOpt = Annotated[Optional[str], typer.Option("--bootstrap", help="Kafka bootstrap servers of the speed "
    "layer's view topics (default $KAFKA_BOOTSTRAP_SERVERS): answers merge their current rows; none: the published "
    "views alone.")]


# --------------------------------------------------------------------------- serve
@app.command()
def serve(
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
    bootstrap: ViewTopicsOpt = None,
    live_dir: Annotated[Optional[Path], typer.Option("--live-dir", help="Base folder of the live table's RocksDB "
        "stores (with --bootstrap; default $DUET_SERVING_LIVE_DIR, else <duet_home>/state/serving-live): this "
        "process's folder below it is removed at shutdown, one left by a crashed process at the next start.")] = None,
) -> None:
    """Serve the pipeline's merged views over HTTP (FastAPI + uvicorn): the pages /ui and
    /ui/views/{view} (charts), the API /health, /views, /views/{view}/keys/{key}?from=&to=&limit=&cursor=,
    /quality; OpenAPI at /docs."""
    setup_logging(False)
    from pipelines.preflight import UserError, check_lake_served, check_port_free
    from serving.api.app import serve as serve_app
    from serving.views.live_dir import check_base

    from serving.api.pages import About

    with user_errors("serve"):
        pipeline, root = pipeline_and_lake(pipeline_ref, lake, write=False)
        check_lake_served(root)
        check_port_free(host, port)
        servers = external_bootstrap(bootstrap)  # live: merge the view topics (docs/live-serving.md)
        if servers is not None:
            try:
                check_base(live_dir)
            except OSError as exc:
                raise UserError(str(exc)) from None
    make_console(stderr=True).print(f"views of {root} at http://{host}:{port}/ui (API docs at /docs)")
    about = About(pipeline.name, pipeline.description, {v.store: v.description for v in pipeline.views})
    serve_app(root, host=host, port=port, about=about, bootstrap=servers, live_dir=live_dir)


# --------------------------------------------------------------------------- query
@app.command()
def query(
    view: Annotated[str, typer.Argument(help="A served view of the pipeline (`duet query --list` names them).")] = "",
    key: Annotated[Optional[str], typer.Argument(help="A key of the view; omitted: list the view's keys.")] = None,
    pipeline_ref: PipelineOpt = None,
    lake: LakeOpt = None,
    from_: Annotated[Optional[str], typer.Option("--from", help="Windows overlapping from this time on: ISO-8601 "
                                                  "(naive = UTC) or epoch ms.")] = None,
    to: Annotated[Optional[str], typer.Option("--to", help="... up to this time (same formats).")] = None,
    list_views: Annotated[bool, typer.Option("--list", help="List the served views.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Keys listed when no key is given.")] = 50,
    bootstrap: ViewTopicsOpt = None,
) -> None:
    """Read a merged view from the lake, as `GET /views/{view}/keys/{key}` does: the rows of
    KEY whose window overlaps [--from, --to], each with the layer it came from (all of them:
    the API's pages, concatenated)."""
    setup_logging(False)
    from pipelines.preflight import UserError, check_lake_served
    from serving.api.times import ms_to_iso, parse_time_ms
    from serving.views.index import ViewIndex

    console = make_console()
    with user_errors("query"):
        _, root = pipeline_and_lake(pipeline_ref, lake, write=False)
        check_lake_served(root)
        index = ViewIndex(root, refresh_interval_s=0)
        if list_views or not view:
            names = index.views()
            if json_out:
                print(json.dumps(names))
            else:
                console.print("\n".join(names) or "(no view)")
            return
        if key is None:
            keys = index.keys(view, limit=limit)
            total = index.key_count(view)
            if json_out:
                print(json.dumps({"view": view, "total": total, "keys": keys}))
            else:
                console.print(f"{view}: {total:,} keys; the first {len(keys)}: " + ", ".join(keys))
            return
        lo = parse_time_ms(from_, "--from") if from_ else None
        hi = parse_time_ms(to, "--to") if to else None
        if lo is not None and hi is not None and lo > hi:
            raise UserError(f"--from ({ms_to_iso(lo)}) is after --to ({ms_to_iso(hi)})")
        from serving.views.served import query_live
        rows = query_live(root, external_bootstrap(bootstrap), view, key, lo, hi).rows  # live: docs/live-serving.md
    if json_out:  # ``value`` as the JSON it holds (the API's ``value``), not its text
        print(json.dumps([{**r, "value": _json_value(r["value"])} for r in rows]))
        return
    from rich.table import Table
    from rich.text import Text

    # Nothing is cut at the terminal's width: full ISO times, a long value folds onto more lines.
    table = Table(title=f"{view} / {key}: {len(rows)} rows")
    table.add_column("window start", no_wrap=True, min_width=24)
    table.add_column("window end", no_wrap=True, min_width=24)
    table.add_column("value", overflow="fold")
    table.add_column("source", no_wrap=True, min_width=5)
    for r in rows:
        table.add_row(ms_to_iso(r["window_start"]) or "", ms_to_iso(r["window_end"]) or "",
                      Text(str(r["value"])), str(r["source"]))  # Text: a value's "[...]" is not markup
    console.print(table)


def _json_value(text: Any) -> Any:
    """A stored value (JSON text) parsed; text that is not JSON as it is."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
