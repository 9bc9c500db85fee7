"""Hand-off ticket commands on the ticket queue the config names
(``strategies.handoffs_path``), for the operators of the ``human`` strategy kind:

``llmroute handoffs list [--status open|claimed|answered] [--limit N]``, ``handoffs show
ID``, ``handoffs claim ID [--operator NAME]``, ``handoffs answer ID TEXT [--operator
NAME]``. Every command prints JSON; a running router serving the same file sees a change at
once (the client fetches the answer with ``GET /v1/handoffs/{ID}``).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmroute.strategy.handoffs import STATUSES

if TYPE_CHECKING:
    from llmroute.config import Config
    from llmroute.strategy.handoffs import HandoffStore


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``handoffs …`` on the top-level subparsers."""
    handoffs = sub.add_parser("handoffs", help="list, show, claim or answer hand-off tickets")
    handoffs.set_defaults(policy_run=run)
    act = handoffs.add_subparsers(dest="handoffs_command", required=True)
    listing = _common(act.add_parser("list", help="tickets, newest first"))
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--limit", type=int, default=100)
    _common(act.add_parser("show", help="one ticket")).add_argument("ticket")
    for name in ("claim", "answer"):
        cmd = _common(act.add_parser(name, help=f"{name} a ticket"))
        cmd.add_argument("ticket")
        if name == "answer":
            cmd.add_argument("text", help="the answer the client will fetch")
        cmd.add_argument("--operator", default=getpass.getuser(), help="who (default: you)")


def _common(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--config", type=Path, help="YAML config naming strategies.handoffs_path")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    """Run a ``handoffs`` command and print its JSON; returns the exit code. Raises
    NotFound for an unknown ticket, InvalidRequest for an answered one."""
    from llmroute.assemble.strategies import handoff_store

    out = asyncio.run(_closing(handoff_store(config), args))
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


async def _closing(store: HandoffStore, args: argparse.Namespace) -> Any:
    try:
        return await _dispatch(store, args)
    finally:
        store.close()


async def _dispatch(store: HandoffStore, args: argparse.Namespace) -> Any:
    cmd = args.handoffs_command
    if cmd == "list":
        return [t.to_json() for t in await store.list(args.status, args.limit)]
    if cmd == "claim":
        return (await store.claim(args.ticket, args.operator, time.time())).to_json()
    if cmd == "answer":
        return (await store.answer(args.ticket, args.text, args.operator,
                                   time.time())).to_json()
    return (await store.get(args.ticket)).to_json()
