"""``llmroute reload [--url URL] [--admin-key KEY]``: ask a running router to re-read its
config file's pools, backends and routing (``POST /admin/reload``,
``assemble/reload.py``).

Prints the answer's JSON and exits 0 when the reload was applied (or nothing changed);
prints the reason and exits 1 when the router refused it (the old backends keep serving);
exits 2 when the router cannot be reached. The admin key (needed with auth on) comes from
``--admin-key`` or the ``LLMROUTE_ADMIN_KEY`` variable. Sending ``SIGHUP`` to the
``llmroute serve`` process does the same (with ``--workers``: to the parent, which passes it
on to every worker).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from llmroute.errors import SignalSourceError

TIMEOUT_S = 120.0
"""Seconds to wait for the answer: the router health-checks new backends first."""


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``reload`` on the top-level subparsers."""
    p = sub.add_parser("reload", help="re-read a running router's backends from its config")
    p.add_argument("--url", default="http://127.0.0.1:8000",
                   help="the router (default: http://127.0.0.1:8000, serve's default address)")
    p.add_argument("--admin-key", default=os.environ.get("LLMROUTE_ADMIN_KEY"),
                   help="the admin key (default: $LLMROUTE_ADMIN_KEY)")
    p.set_defaults(reload_run=run)


def run(args: argparse.Namespace) -> int:
    """``POST {url}/admin/reload``; returns the exit status (module docstring). Raises
    SignalSourceError when the router cannot be reached."""
    import urllib.error
    import urllib.request

    target = args.url.rstrip("/") + "/admin/reload"
    headers = {"authorization": f"Bearer {args.admin_key}"} if args.admin_key else {}
    request = urllib.request.Request(target, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:  # noqa: S310
            print(json.dumps(json.loads(resp.read()), indent=2))
            return 0
    except urllib.error.HTTPError as exc:
        print(f"llmroute: reload refused ({exc.code}): {_message(exc.read())}",
              file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        raise SignalSourceError(f"POST {target}: {exc}") from exc


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")
