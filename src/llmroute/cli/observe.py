"""``llmroute trace ID [--url | --store PATH]`` — one request's trace from a running router (or
from the trace store's SQLite file) as a timeline;
``llmroute audit verify|show|query|prov|export`` — the decision audit's hash chain
(``observe.audit``).

``audit verify`` exits 0 when the chain is intact (gaps, decisions the router could not
write, are listed) and 1 naming the first broken record; ``audit show REQUEST_ID`` and
``audit query --since … --until … [--backend] [--strategy] [--tenant]`` print JSON lines.
``audit prov REQUEST_ID`` and ``audit export`` (``query``'s filters) print the records'
provenance as W3C PROV (``--format prov-o``: PROV-O JSON-LD, the default; ``prov-json``:
PROV-JSON; ``observe.prov``); both walk the chain first and, when it is broken, mark the
records from the broken one on as unverified, say so on stderr and exit 1.
The audit database is ``--path``, else the config's ``observe.audit.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from llmroute.errors import ConfigError
from llmroute.observe import audit_chain, prov


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``trace`` and ``audit …`` on the top-level subparsers."""
    trace = sub.add_parser("trace", help="print one request's trace from a running router")
    trace.add_argument("request_id")
    trace.add_argument("--url", default="http://127.0.0.1:8000", help="the router")
    trace.add_argument("--json", action="store_true", help="print the trace's JSON")
    trace.add_argument("--store", help="read it from this trace store (observe.trace_store."
                       "path) instead of asking a router")
    trace.set_defaults(observe_run=show_trace)
    audit = sub.add_parser("audit", help="verify, show or query the decision audit")
    act = audit.add_subparsers(dest="audit_command", required=True)
    for name, help_ in (("verify", "walk the hash chain"),
                        ("show", "one request's records"), ("query", "records in a time range"),
                        ("prov", "one request's provenance as W3C PROV"),
                        ("export", "records in a time range as W3C PROV")):
        p = act.add_parser(name, help=help_)
        p.add_argument("--path", help="the audit database (default: observe.audit.path)")
        p.add_argument("--config", type=Path, help="YAML config naming observe.audit.path")
        p.set_defaults(observe_run=run_audit)
    for name in ("show", "prov"):
        act.choices[name].add_argument("request_id")
    for name in ("prov", "export"):
        act.choices[name].add_argument("--format", choices=("prov-o", "prov-json"),
                                       default="prov-o", help="PROV-O JSON-LD or PROV-JSON")
    for q in (act.choices["query"], act.choices["export"]):
        q.add_argument("--since", default="0", help="ISO 8601 time or epoch seconds")
        q.add_argument("--until", help="ISO 8601 time or epoch seconds (default: now)")
        for name in ("backend", "strategy", "tenant"):
            q.add_argument(f"--{name}")


def show_trace(args: argparse.Namespace) -> int:
    """Fetch ``GET /trace/{id}`` (or read the trace store ``--store``) and print it; 1 when
    the router answers an error or the store has no such trace, 2 when neither is
    reachable."""
    if args.store:
        return _stored_trace(args)
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{args.url.rstrip('/')}/trace/{urllib.parse.quote(args.request_id, safe='')}"
    headers = {}
    if os.environ.get("LLMROUTE_ADMIN_KEY"):
        headers["authorization"] = f"Bearer {os.environ['LLMROUTE_ADMIN_KEY']}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),  # noqa: S310
                                    timeout=10) as resp:
            trace = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        print(f"llmroute trace: {json.loads(err.read())['error']['message']}", file=sys.stderr)
        return 1
    except urllib.error.URLError as err:
        print(f"llmroute trace: cannot reach {args.url}: {err.reason}", file=sys.stderr)
        return 2
    print(json.dumps(trace, indent=2) if args.json else timeline(trace))
    return 0


def _stored_trace(args: argparse.Namespace) -> int:
    from llmroute.observe import trace_store

    try:
        found = trace_store.read(args.store, args.request_id)
    except sqlite3.Error as err:
        print(f"llmroute trace: cannot read {args.store}: {err}", file=sys.stderr)
        return 2
    if found is None:
        print(f"llmroute trace: no trace for request {args.request_id!r} in {args.store}",
              file=sys.stderr)
        return 1
    trace = found.to_json()
    print(json.dumps(trace, indent=2) if args.json else timeline(trace))
    return 0


def timeline(trace: dict[str, Any]) -> str:
    """A trace as readable text: a header, then one line per step (start and duration in
    ms, the step, what it decided)."""
    head = [f"request {trace['request_id']}  trace {trace['trace_id']}  status "
            f"{trace['status']}  {trace['duration_ms']:.3f} ms",
            "  ".join(f"{k} {trace[k]}" for k in ("tenant", "intent", "strategy", "pool",
                                                  "backend", "ttft_ms") if k in trace),
            f"{'start ms':>10} {'dur ms':>10}  step"]
    rows = []
    for s in trace["steps"]:
        fields = {k: v for k, v in s.items() if k not in ("step", "start_ms", "duration_ms")}
        rows.append(f"{s['start_ms']:>10.3f} {s['duration_ms']:>10.3f}  {s['step']:<9} "
                    + " ".join(f"{k}={_short(v)}" for k, v in fields.items() if v is not None))
    return "\n".join(head + rows)


def _short(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def run_audit(args: argparse.Namespace) -> int:
    """``audit verify|show|query``; 2 when there is no audit database to read."""
    from llmroute.config import load_config

    path = args.path or load_config(args.config).observe.audit.path
    if path is None:
        raise ConfigError("no audit database: pass --path or set observe.audit.path")
    if not Path(path).exists():
        raise ConfigError(f"no audit database at {path}")
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        if args.audit_command == "verify":
            return _verify(conn)
        if args.audit_command in ("prov", "export"):
            return _export(conn, args)
        rows = _rows(conn, args)
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))
    return 0 if rows or args.audit_command == "query" else 1


def _rows(conn: sqlite3.Connection, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The records ``show``/``prov`` (one request) or ``query``/``export`` ask for."""
    if args.audit_command in ("show", "prov"):
        return audit_chain.show(conn, args.request_id)
    return audit_chain.query(conn, when(args.since), when(args.until) if args.until
                             else time.time(), backend=args.backend,
                             strategy=args.strategy, tenant=args.tenant)


def _export(conn: sqlite3.Connection, args: argparse.Namespace) -> int:
    """Print the records' PROV document; 1 when the chain is broken (said on stderr) or
    ``prov`` found no record."""
    rows, v = _rows(conn, args), audit_chain.verify(conn)
    g = prov.graph(rows, v.broken)
    print(json.dumps(prov.prov_o(g) if args.format == "prov-o" else prov.prov_json(g),
                     indent=2, ensure_ascii=False))
    if not v.ok:
        print(f"llmroute audit: the chain is broken at record {v.broken}: {v.why}; records "
              f"from {v.broken} on are exported with chainVerified false", file=sys.stderr)
        return 1
    if not rows and args.audit_command == "prov":
        print(f"llmroute audit: no record for request {args.request_id!r}", file=sys.stderr)
        return 1
    return 0


def _verify(conn: sqlite3.Connection) -> int:
    v = audit_chain.verify(conn)
    for seq, dropped in v.gaps:
        print(f"gap at record {seq}: {dropped} decisions could not be written")
    if v.ok:
        print(f"audit chain intact: {v.checked} records")
        return 0
    print(f"audit chain broken at record {v.broken}: {v.why} ({v.checked} records before it "
          "verified)")
    return 1


def when(text: str) -> float:
    """Epoch seconds from ``text`` (epoch seconds or ISO 8601; naive times are local).
    Raises ConfigError for anything else."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ConfigError(f"not a time: {text!r} (ISO 8601 or epoch seconds)") from None
