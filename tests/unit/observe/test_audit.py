"""The decision audit: one hash-chained record per request written off the request path;
``verify`` passes on the live log and names the first broken record after an edit, a
deletion or a reorder; an unwritable path never blocks or fails a request."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Counter

from llmroute.observe import audit_chain
from llmroute.observe.audit import AuditLog

CHAT = "/v1/chat/completions"


def chat() -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


async def served(path: str, n: int) -> list[str]:
    """Serve ``n`` requests with the audit at ``path``; returns their request ids."""
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          observe={"audit": {"path": path}})
        async with open_router(cfg) as (rt, client):
            ids = [(await client.post(CHAT, json=chat())).headers["x-request-id"]
                   for _ in range(n)]
            assert rt.observer.audit is not None
            await rt.observer.audit.close()
    return ids


def verdict(path: Path) -> audit_chain.Verdict:
    with sqlite3.connect(path) as conn:
        return audit_chain.verify(conn)


def _chained(path: Path) -> int:
    """Records a live writer has chained so far (0 before its schema exists)."""
    try:
        return verdict(path).checked if path.exists() else 0
    except sqlite3.OperationalError:  # the file is there, its tables not yet
        return 0


async def test_every_request_leaves_one_chained_record(tmp_path):
    path = tmp_path / "audit.sqlite3"
    ids = await served(str(path), 3)
    v = verdict(path)
    assert v.ok and v.checked == 3
    with sqlite3.connect(path) as conn:
        recs = [audit_chain.show(conn, rid)[0] for rid in ids]
    assert [r["seq"] for r in recs] == [1, 2, 3]
    assert recs[0]["prev"] == audit_chain.GENESIS and recs[1]["prev"] == recs[0]["hash"]
    assert recs[0]["backend"] == "a" and recs[0]["status"] == 200
    assert [s["step"] for s in recs[0]["steps"]] == ["gate", "strategy", "anchor", "attempt"]
    assert "hi" not in str(recs[0])  # no prompt text in the audit


def _tamper(path: Path, how: str) -> None:
    with sqlite3.connect(path) as conn:
        if how == "edit":  # one byte of record 2
            text = conn.execute("SELECT record FROM audit WHERE seq = 2").fetchone()[0]
            i = text.index('"status":200') + len('"status":20')
            conn.execute("UPDATE audit SET record = ? WHERE seq = 2",
                         (text[:i] + "1" + text[i + 1:],))
        elif how == "delete":
            conn.execute("DELETE FROM audit WHERE seq = 2")
        else:  # swap the contents of records 2 and 3
            rows = conn.execute("SELECT seq, at, request_id, record, hash FROM audit "
                                "WHERE seq IN (2, 3) ORDER BY seq").fetchall()
            for (seq, *_), (_, *rest) in zip(rows, reversed(rows), strict=True):
                conn.execute("UPDATE audit SET at = ?, request_id = ?, record = ?, hash = ? "
                             "WHERE seq = ?", (*rest, seq))


@pytest.mark.parametrize(("how", "why"), [("edit", "edited"), ("delete", "deleted"),
                                          ("reorder", "reordered")],
                         ids=["edit", "delete", "reorder"])
async def test_verify_names_the_first_broken_record(tmp_path, how, why):
    path = tmp_path / "audit.sqlite3"
    await served(str(path), 4)
    assert verdict(path).ok
    _tamper(path, how)
    v = verdict(path)
    assert not v.ok and v.broken in (2, 3) and why in v.why
    assert v.broken == (3 if how == "delete" else 2)


async def test_an_unwritable_audit_never_blocks_a_request(tmp_path):
    missing = str(tmp_path / "no" / "such" / "dir" / "audit.sqlite3")
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          observe={"audit": {"path": missing}})
        async with open_router(cfg) as (rt, client):
            codes = [(await asyncio.wait_for(client.post(CHAT, json=chat()), 5)).status_code
                     for _ in range(3)]
            assert rt.observer.audit is not None
            await rt.observer.audit.flush()
            metrics = (await client.get("/metrics")).text
            await rt.observer.audit.close()
    assert codes == [200, 200, 200]
    assert "llmroute_audit_failures_total" in metrics
    assert "llmroute_audit_failures_total 0.0" not in metrics


async def test_a_failing_disk_is_counted_and_the_gap_is_recorded_after(tmp_path):
    path = tmp_path / "later" / "audit.sqlite3"  # its folder appears only later
    dropped, failures = Counter("d", "d", registry=None), Counter("f", "f", registry=None)
    log = AuditLog(str(path), None, 100, dropped, failures)
    log.submit({"at": 1.0, "request_id": "r1"})
    await log.flush()
    log.submit({"at": 2.0, "request_id": "r2"})
    await log.flush()
    assert failures._value.get() == 2
    path.parent.mkdir()
    log.submit({"at": 3.0, "request_id": "r3"})
    await log.close()
    v = verdict(path)
    assert v.ok and v.checked == 2 and v.gaps == ((1, 2),)
    with sqlite3.connect(path) as conn:
        assert audit_chain.show(conn, "r3")[0]["seq"] == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
async def test_a_read_only_file_is_counted(tmp_path):
    path = tmp_path / "audit.sqlite3"
    dropped, failures = Counter("d", "d", registry=None), Counter("f", "f", registry=None)
    log = AuditLog(str(path), None, 100, dropped, failures)
    log.submit({"at": 1.0, "request_id": "r1"})
    await log.close()
    path.chmod(0o444)
    log.submit({"at": 2.0, "request_id": "r2"})
    await log.close()
    assert failures._value.get() == 1


async def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path):
    dropped, failures = Counter("d", "d", registry=None), Counter("f", "f", registry=None)
    log = AuditLog(str(tmp_path / "a.sqlite3"), None, 2, dropped, failures)
    for i in range(5):  # no await in between: the writer cannot take any yet
        log.submit({"at": float(i), "request_id": f"r{i}"})
    await log.close()
    assert dropped._value.get() == 3
    with sqlite3.connect(tmp_path / "a.sqlite3") as conn:
        v = audit_chain.verify(conn)
    assert v.ok and v.checked == 3 and v.gaps == ((1, 3),)  # the gap, then r0 and r1


def test_retention_prunes_old_records_and_keeps_the_chain_verifiable(tmp_path):
    conn = audit_chain.connect(str(tmp_path / "a.sqlite3"))
    audit_chain.append(conn, [{"at": float(t), "request_id": f"r{t}"} for t in range(10)])
    assert audit_chain.prune(conn, 5.0) == 5
    v = audit_chain.verify(conn)
    assert v.ok and v.checked == 5
    conn.execute("DELETE FROM audit WHERE seq = 6")  # the new first record
    conn.commit()
    assert audit_chain.verify(conn).broken == 7


def test_owned_records_chain_as_copied_ones(tmp_path):
    rows = []
    for name, owned in (("copied", False), ("owned", True)):
        conn = audit_chain.connect(str(tmp_path / f"{name}.sqlite3"))
        recs = [{"at": float(t), "request_id": f"r{t}", "prev": "x"} for t in range(3)]
        audit_chain.append(conn, recs, owned=owned)
        assert [r["prev"] == "x" for r in recs] == [not owned] * 3  # set in place if owned
        rows.append(conn.execute("SELECT * FROM audit ORDER BY seq").fetchall())
        assert audit_chain.verify(conn).ok
    assert rows[0] == rows[1]


def test_a_batch_longer_than_one_insert_chains_in_order(tmp_path):
    """Rows go in ``ROWS_PER_INSERT`` to a statement; a batch of several statements (and
    a short last one) is one unbroken chain, each row's columns its own record's."""
    conn = audit_chain.connect(str(tmp_path / "a.sqlite3"))
    n = audit_chain.ROWS_PER_INSERT * 2 + 3
    seq, last = audit_chain.append(conn, [{"at": float(t), "request_id": f"r{t}"}
                                          for t in range(n)])
    assert seq == n and audit_chain.verify(conn).ok and audit_chain.verify(conn).checked == n
    rows = conn.execute("SELECT seq, at, request_id, record, hash FROM audit ORDER BY seq"
                        ).fetchall()
    assert [(s, a, r) for s, a, r, _, _ in rows] == [
        (t + 1, float(t), f"r{t}") for t in range(n)]
    assert all(audit_chain.digest(text.encode()) == h for *_, text, h in rows)
    assert rows[-1][4] == last
    assert audit_chain.append(conn, [{"at": 1e3, "request_id": "next"}])[0] == n + 1
    assert audit_chain.verify(conn).ok


def test_query_filters_by_time_backend_strategy_and_tenant(tmp_path):
    conn = audit_chain.connect(str(tmp_path / "a.sqlite3"))
    audit_chain.append(conn, [
        {"at": 1.0, "request_id": "a", "backend": "x", "strategy": "s@1", "tenant": "t"},
        {"at": 2.0, "request_id": "b", "backend": "y", "strategy": "s@2", "tenant": "u"},
        {"at": 3.0, "request_id": "c", "backend": "x", "strategy": "v@1", "tenant": "t"}])
    ids = lambda rows: [r["request_id"] for r in rows]  # noqa: E731
    assert ids(audit_chain.query(conn, 0, 10)) == ["a", "b", "c"]
    assert ids(audit_chain.query(conn, 1.5, 3.0)) == ["b"]
    assert ids(audit_chain.query(conn, 0, 10, backend="x")) == ["a", "c"]
    assert ids(audit_chain.query(conn, 0, 10, strategy="s")) == ["a", "b"]
    assert ids(audit_chain.query(conn, 0, 10, strategy="s@2", tenant="u")) == ["b"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["backend", "intent", "n"]),
                                st.one_of(st.text(max_size=8), st.integers(-2**62, 2**62), st.floats(
                                    allow_nan=False, allow_infinity=False))),
                min_size=1, max_size=6), st.data())
def test_any_one_byte_edit_breaks_the_chain(records, data):
    conn = audit_chain.connect(":memory:")
    audit_chain.append(conn, [{**r, "at": float(i), "request_id": str(i)}
                              for i, r in enumerate(records)])
    assert audit_chain.verify(conn).ok
    seq = data.draw(st.integers(1, len(records)))
    text = conn.execute("SELECT record FROM audit WHERE seq = ?", (seq,)).fetchone()[0]
    i = data.draw(st.integers(0, len(text) - 1))
    edited = text[:i] + ("x" if text[i] != "x" else "y") + text[i + 1:]
    conn.execute("UPDATE audit SET record = ? WHERE seq = ?", (edited, seq))
    v = audit_chain.verify(conn)
    assert not v.ok and v.broken == seq


def test_a_killed_writer_leaves_a_verifiable_prefix(tmp_path):
    """WAL with synchronous=NORMAL: a writer killed mid-stream loses at most its last
    batches; what the file holds is still an intact chain."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "a.sqlite3"
    # the writer stops by itself after 60 s, so a test run that dies leaves no writer behind
    script = ("import sys, time\nfrom llmroute.observe import audit_chain\n"
              "conn = audit_chain.connect(sys.argv[1])\ni = 0\nend = time.monotonic() + 60\n"
              "while time.monotonic() < end:\n"
              "    audit_chain.append(conn, [{'at': float(i + j), 'request_id': f'r{i + j}',"
              " 'pad': 'x' * 500} for j in range(50)])\n    i += 50\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if _chained(path) >= 200:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    v = verdict(path)
    assert v.ok and v.checked >= 200 and v.checked % 50 == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_writers_in_two_processes_share_one_chain(tmp_path):
    """``serve --workers`` gives each worker its own audit writer on the same file: each
    batch reads the tail inside its write transaction, so the two processes' batches
    interleave into one intact chain and none is refused (read outside it, both would
    claim the same ``seq`` and one batch would fail on the primary key)."""
    import subprocess
    import sys

    path = tmp_path / "a.sqlite3"
    audit_chain.connect(str(path)).close()
    script = ("import sys\nfrom llmroute.observe import audit_chain\n"
              "conn = audit_chain.connect(sys.argv[1])\n"
              "for i in range(200):\n"
              "    audit_chain.append(conn, [{'at': float(i), 'request_id': f'{sys.argv[2]}{i}-{j}',"
              " 'pad': 'x' * 200} for j in range(20)])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), name], env=env,
                              stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    v = verdict(path)
    assert v.ok and v.checked == 2 * 200 * 20
