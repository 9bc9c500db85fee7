"""The audit's W3C PROV export: records from a served request become a PROV-O JSON-LD graph
that rdflib parses into the expected triples, a PROV-JSON document with the same relations,
and a tampered log is exported with its broken records marked and exit status 1."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from rdflib import Graph, Namespace, URIRef
from rdflib.namespace import RDF

from llmroute.cli.main import main
from llmroute.observe import audit_chain, prov
from llmroute.observe.audit import sha256_text

CHAT = "/v1/chat/completions"
P = Namespace(prov.PROV)
LR = Namespace(prov.VOCAB)
ANSWERS: dict[str, str] = {}
# rdflib's JSON-LD parser uses its own deprecated ConjunctiveGraph internally
pytestmark = pytest.mark.filterwarnings("ignore:ConjunctiveGraph:DeprecationWarning")


async def served(path: Path, n: int) -> tuple[list[str], str]:
    """Serve ``n`` requests with the audit at ``path``; their ids and the config digest
    (the answers' texts in ``ANSWERS``)."""
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          observe={"audit": {"path": str(path)}})
        async with open_router(cfg) as (rt, client):
            ids = []
            for i in range(n):
                r = await client.post(CHAT, json={"model": "auto", "messages": [
                    {"role": "user", "content": f"question {i}"}]})
                ids.append(r.headers["x-request-id"])
                ANSWERS[ids[-1]] = r.json()["choices"][0]["message"]["content"]
            assert rt.observer.audit is not None and rt.observer.config_sha256
            await rt.observer.audit.close()
            return ids, rt.observer.config_sha256


def record(path: Path, rid: str) -> dict[str, Any]:
    with sqlite3.connect(path) as conn:
        return audit_chain.show(conn, rid)[0]


def rdf(doc: dict[str, Any]) -> Graph:
    return Graph().parse(data=json.dumps(doc), format="json-ld")


def req(rid: str, part: str) -> URIRef:
    return URIRef(f"urn:llmroute:request:{rid}/{part}")


async def test_each_record_names_its_versions_and_digests_never_texts(tmp_path):
    path = tmp_path / "audit.sqlite3"
    (rid,), config = await served(path, 1)
    rec = record(path, rid)
    assert rec["config_sha256"] == config and len(config) == 64
    assert rec["prompt_sha256"] == sha256_text("question 0")
    assert rec["answer_sha256"] == sha256_text(ANSWERS[rid])
    assert rec["router"] and rec["strategy"]
    assert "question 0" not in json.dumps(rec)


async def test_prov_o_graph_has_the_decision_its_steps_entities_and_agents(tmp_path):
    path = tmp_path / "audit.sqlite3"
    (rid,), config = await served(path, 1)
    rec = record(path, rid)
    g = rdf(prov.prov_o(prov.graph([rec])))
    decision, request, answer = (req(rid, p) for p in ("decision", "request", "answer"))
    assert (decision, RDF.type, P.Activity) in g
    assert (request, RDF.type, P.Entity) in g and (answer, RDF.type, P.Entity) in g
    assert (decision, P.used, request) in g
    assert (decision, P.used, URIRef(f"urn:llmroute:sha256:{config}")) in g
    strategy = URIRef(f"urn:llmroute:strategy:{rec['strategy']}")
    assert (decision, P.used, strategy) in g and (decision, P.wasAssociatedWith, strategy) in g
    assert (strategy, RDF.type, P.SoftwareAgent) in g
    routers = list(g.objects(decision, P.wasAssociatedWith))
    assert any(str(a).startswith("urn:llmroute:router:") for a in routers)
    steps = sorted(g.subjects(LR.partOf, decision))
    assert len(steps) == len(rec["steps"]) == 4
    attempt = req(rid, "step/3-attempt")
    assert (attempt, P.wasAssociatedWith, URIRef("urn:llmroute:backend:a")) in g
    assert (attempt, P.wasInformedBy, req(rid, "step/2-anchor")) in g
    assert (answer, P.wasGeneratedBy, attempt) in g
    assert (answer, P.wasDerivedFrom, request) in g
    assert str(g.value(request, LR.sha256)) == rec["prompt_sha256"]
    assert g.value(decision, P.startedAtTime) is not None
    assert g.value(decision, LR.chainVerified).toPython() is True


def test_the_key_acts_for_its_tenant_and_only_its_id_is_exported():
    rec = {"request_id": "r1", "at": 1.0, "status": 200, "tenant": "acme",
           "key_id": "k_12ab", "steps": [], "seq": 1, "hash": "h", "prev": "p"}
    g = rdf(prov.prov_o(prov.graph([rec])))
    key, tenant = URIRef("urn:llmroute:key:k_12ab"), URIRef("urn:llmroute:tenant:acme")
    assert (key, P.actedOnBehalfOf, tenant) in g
    assert (req("r1", "decision"), P.wasAssociatedWith, key) in g
    assert (tenant, RDF.type, P.Agent) in g


def test_odd_request_ids_still_make_valid_iris():
    rec = {"request_id": "a b/c#d", "at": 1.0, "status": 200, "steps": []}
    g = rdf(prov.prov_o(prov.graph([rec])))
    assert (req("a%20b%2Fc%23d", "decision"), RDF.type, P.Activity) in g


def test_prov_json_has_the_same_relations():
    rec = {"request_id": "r1", "at": 1.0, "status": 200, "tenant": "t", "key_id": "k",
           "steps": [{"step": "gate", "start_ms": 0.0, "duration_ms": 1.0},
                     {"step": "attempt", "start_ms": 1.0, "duration_ms": 2.0,
                      "backend": "a", "ok": True}], "answer_sha256": "ab"}
    doc = prov.prov_json(prov.graph([rec]))
    assert "lrreq:r1/decision" in doc["activity"]
    assert doc["activity"]["lrreq:r1/step/1-attempt"]["prov:startTime"].startswith("1970")
    assert "lrbe:a" in doc["agent"] and "lrreq:r1/answer" in doc["entity"]
    informed = list(doc["wasInformedBy"].values())
    assert informed == [{"prov:informed": "lrreq:r1/step/1-attempt",
                         "prov:informant": "lrreq:r1/step/0-gate"}]
    assert {"prov:entity": "lrreq:r1/answer", "prov:activity": "lrreq:r1/step/1-attempt"} \
        in doc["wasGeneratedBy"].values()
    assert {"prov:delegate": "lrkey:k", "prov:responsible": "lrten:t"} \
        in doc["actedOnBehalfOf"].values()


def _edit(path: Path, seq: int) -> None:
    with sqlite3.connect(path) as conn:
        text = conn.execute("SELECT record FROM audit WHERE seq = ?", (seq,)).fetchone()[0]
        conn.execute("UPDATE audit SET record = ? WHERE seq = ?",
                     (text.replace('"status":200', '"status":201'), seq))


async def test_cli_prov_and_export(tmp_path, capsys):
    path = tmp_path / "audit.sqlite3"
    ids, _ = await served(path, 3)
    capsys.readouterr()  # the request log lines
    assert main(["audit", "prov", ids[0], "--path", str(path)]) == 0
    assert (req(ids[0], "decision"), RDF.type, P.Activity) in rdf(
        json.loads(capsys.readouterr().out))
    assert main(["audit", "export", "--format", "prov-json", "--path", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {f"lrreq:{i}/decision" for i in ids} <= set(doc["activity"])
    assert main(["audit", "prov", "nope", "--path", str(path)]) == 1
    assert "no record" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["prov-o", "prov-json"])
async def test_export_of_a_tampered_log_says_so(tmp_path, capsys, fmt):
    path = tmp_path / "audit.sqlite3"
    ids, _ = await served(path, 3)
    _edit(path, 2)
    capsys.readouterr()  # the request log lines
    assert main(["audit", "export", "--format", fmt, "--path", str(path)]) == 1
    out = capsys.readouterr()
    assert "broken at record 2" in out.err and "edited" in out.err
    doc = json.loads(out.out)
    if fmt == "prov-o":
        g = rdf(doc)
        flags = [g.value(req(i, "decision"), LR.chainVerified).toPython() for i in ids]
    else:
        flags = [doc["activity"][f"lrreq:{i}/decision"]["llmroute:chainVerified"]
                 for i in ids]
    assert flags == [True, False, False]


async def test_trace_endpoint_answers_prov(tmp_path):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            rid = (await client.post(CHAT, json={"model": "auto", "messages": [
                {"role": "user", "content": "hi"}]})).headers["x-request-id"]
            r = await client.get(f"/trace/{rid}", params={"format": "prov"})
    assert r.status_code == 200
    g = rdf(r.json())
    assert (req(rid, "decision"), RDF.type, P.Activity) in g
    assert (req(rid, "step/3-attempt"), P.wasAssociatedWith,
            URIRef("urn:llmroute:backend:a")) in g
