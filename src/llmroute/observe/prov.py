"""W3C PROV for decision-audit records: ``graph`` turns records (``audit_chain.show`` /
``query`` rows, or ``audit.audit_record`` of a live trace) into one provenance graph,
which ``prov_o`` writes as JSON-LD in the PROV-O vocabulary and ``prov_json`` as W3C
PROV-JSON. Pure functions, no I/O.

Per record (request ``R``):

* ``prov:Activity`` ``lrreq:R/decision`` — the routing decision (start/end times, status,
  intent, strategy, pool, backend; the record's audit ``seq``, ``hash``, ``prev`` and
  ``chainVerified``: false when ``audit verify`` found the chain broken at or before it);
  one ``prov:Activity`` per step (``lrreq:R/step/<i>-<name>``: gate, strategy, anchor,
  attempt, handoff, …), ``llmroute:partOf`` the decision, each ``prov:wasInformedBy``
  the step before it.
* ``prov:Entity``: the request (``lrreq:R/request``, its prompt's ``sha256``; the
  decision ``prov:used`` it), the answer (``lrreq:R/answer``, its ``sha256``,
  ``prov:wasGeneratedBy`` the attempt that answered, ``prov:wasDerivedFrom`` the request),
  the config version (``lrsha:<config digest>``) and the strategy version
  (``lrstr:<id>@<version>``), both ``prov:used`` by the decision.
* ``prov:Agent``: the router instance (``lrrouter:<host:pid>``, a ``prov:SoftwareAgent``),
  the strategy version (also a ``prov:SoftwareAgent``), each engine an attempt or handoff
  ran on (``lrbe:<backend>``), the caller's key (``lrkey:<key id>``, never the key)
  ``prov:actedOnBehalfOf`` its tenant (``lrten:<tenant>``); the decision
  ``prov:wasAssociatedWith`` the router, the strategy and the key (else the tenant).

Gap records (decisions the router could not write) become ``llmroute:Gap`` entities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

PROV = "http://www.w3.org/ns/prov#"
VOCAB = "https://llmroute.dev/ns/audit#"
PREFIXES = {"prov": PROV, "xsd": "http://www.w3.org/2001/XMLSchema#", "llmroute": VOCAB,
            "lrreq": "urn:llmroute:request:", "lrbe": "urn:llmroute:backend:",
            "lrkey": "urn:llmroute:key:", "lrten": "urn:llmroute:tenant:",
            "lrstr": "urn:llmroute:strategy:", "lrrouter": "urn:llmroute:router:",
            "lrsha": "urn:llmroute:sha256:", "lraudit": "urn:llmroute:audit:"}
KINDS = {"entity": "prov:Entity", "activity": "prov:Activity", "agent": "prov:Agent"}
# PROV-JSON's two roles of each relation: (the JSON-LD subject's, the object's)
ROLES = {"wasGeneratedBy": ("prov:entity", "prov:activity"),
         "used": ("prov:activity", "prov:entity"),
         "wasAssociatedWith": ("prov:activity", "prov:agent"),
         "wasInformedBy": ("prov:informed", "prov:informant"),
         "actedOnBehalfOf": ("prov:delegate", "prov:responsible"),
         "wasDerivedFrom": ("prov:generatedEntity", "prov:usedEntity")}
STEP_FIELDS = ("backend", "to", "reason", "intent", "confidence", "source", "strategy",
               "kind", "pool", "ok", "status", "model", "tokens", "ttft_ms", "at_token",
               "key_id", "tenant", "span_id")
DECISION_FIELDS = ("trace_id", "status", "intent", "strategy", "pool", "backend",
                   "tokens_in", "tokens_out", "finish_reason", "error")


@dataclass
class Node:
    """One PROV node: ``kind`` (entity, activity, agent), extra ``types`` (prefixed names),
    ``start``/``end`` (activities: epoch s) and ``attrs`` (``llmroute:`` attributes)."""

    kind: str
    types: list[str] = field(default_factory=list)
    start: float | None = None
    end: float | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    """Nodes by prefixed id and the relations ``(relation, subject, object)`` between them
    (relation one of ``ROLES``; subject as PROV-O's property has it)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    relations: list[tuple[str, str, str]] = field(default_factory=list)

    def node(self, nid: str, kind: str, /, *types: str, **attrs: Any) -> str:
        """Add (or extend) node ``nid`` of ``kind`` (attributes named anything, ``kind``
        included); returns ``nid``."""
        n = self.nodes.setdefault(nid, Node(kind))
        n.types += [t for t in types if t not in n.types]
        n.attrs.update({k: v for k, v in attrs.items() if v is not None})
        return nid

    def rel(self, relation: str, subject: str, obj: str) -> None:
        """Add ``subject relation obj`` once."""
        if (relation, subject, obj) not in self.relations:
            self.relations.append((relation, subject, obj))


def graph(records: list[dict[str, Any]], broken: int | None = None) -> Graph:
    """The provenance of ``records`` (audit records; with ``seq``/``hash`` when read from
    the database); ``broken``: the first record ``seq`` the chain check failed at (None:
    intact), so that it and the ones after it are marked ``chainVerified: false``."""
    g = Graph()
    for rec in records:
        seq = rec.get("seq")
        verified = None if seq is None else broken is None or seq < broken
        if rec.get("kind") == "gap":
            g.node(f"lraudit:{seq}", "entity", "llmroute:Gap", seq=seq,
                   dropped=rec.get("dropped"), chainVerified=verified)
        else:
            _decision(g, rec, verified)
    return g


def _decision(g: Graph, rec: dict[str, Any], verified: bool | None) -> None:
    base = f"lrreq:{_local(rec['request_id'])}"
    steps = rec.get("steps", [])
    end = max((s["start_ms"] + s["duration_ms"] for s in steps), default=0.0)
    act = g.node(f"{base}/decision", "activity", "llmroute:RoutingDecision",
                 requestId=rec["request_id"], seq=rec.get("seq"), hash=rec.get("hash"),
                 prev=rec.get("prev"), chainVerified=verified,
                 **{k: rec.get(k) for k in DECISION_FIELDS})
    g.nodes[act].start, g.nodes[act].end = rec["at"], rec["at"] + end / 1000
    request = g.node(f"{base}/request", "entity", "llmroute:Request",
                     sha256=rec.get("prompt_sha256"))
    g.rel("used", act, request)
    _versions(g, act, rec)
    _callers(g, act, rec)
    answered_by = _steps(g, base, act, rec["at"], steps)
    if rec.get("answer_sha256") or answered_by:
        answer = g.node(f"{base}/answer", "entity", "llmroute:Answer",
                        sha256=rec.get("answer_sha256"))
        g.rel("wasGeneratedBy", answer, answered_by or act)
        g.rel("wasDerivedFrom", answer, request)


def _versions(g: Graph, act: str, rec: dict[str, Any]) -> None:
    """The config and strategy versions the decision used, the router that made it."""
    if rec.get("config_sha256"):
        g.rel("used", act, g.node(f"lrsha:{rec['config_sha256']}", "entity",
                                  "llmroute:ConfigVersion", sha256=rec["config_sha256"]))
    if rec.get("strategy"):
        strategy = g.node(f"lrstr:{_local(rec['strategy'])}", "entity",
                          "prov:SoftwareAgent", "llmroute:StrategyVersion",
                          strategy=rec["strategy"])
        g.rel("used", act, strategy)
        g.rel("wasAssociatedWith", act, strategy)
    if rec.get("router"):
        g.rel("wasAssociatedWith", act, g.node(f"lrrouter:{_local(rec['router'])}",
                                               "agent", "prov:SoftwareAgent",
                                               instance=rec["router"]))


def _callers(g: Graph, act: str, rec: dict[str, Any]) -> None:
    """The caller's key acting for its tenant (ids only)."""
    tenant = rec.get("tenant") and g.node(f"lrten:{_local(rec['tenant'])}", "agent",
                                          "prov:Organization", tenant=rec["tenant"])
    key = rec.get("key_id") and g.node(f"lrkey:{_local(rec['key_id'])}", "agent",
                                       "llmroute:ApiKey", keyId=rec["key_id"])
    if key and tenant:
        g.rel("actedOnBehalfOf", key, tenant)
    if key or tenant:
        g.rel("wasAssociatedWith", act, key or tenant)


def _steps(g: Graph, base: str, act: str, at: float, steps: list[dict[str, Any]]
           ) -> str | None:
    """One activity per step, chained by ``wasInformedBy``; returns the id of the attempt
    that answered (the last ``ok`` one), or None."""
    prev = answered = None
    for i, s in enumerate(steps):
        sid = g.node(f"{base}/step/{i}-{_local(s['step'])}", "activity", "llmroute:Step",
                     step=s["step"], partOf=act, **{k: _scalar(s.get(k)) for k in STEP_FIELDS})
        n, t0 = g.nodes[sid], at + s["start_ms"] / 1000
        n.start, n.end = t0, t0 + s["duration_ms"] / 1000
        for backend in (s.get("backend"), s.get("to")) if s["step"] != "anchor" else ():
            if backend:
                g.rel("wasAssociatedWith", sid, g.node(
                    f"lrbe:{_local(backend)}", "agent", "prov:SoftwareAgent",
                    "llmroute:Engine", backend=backend))
        if prev is not None:
            g.rel("wasInformedBy", sid, prev)
        if s["step"] == "attempt" and s.get("ok"):
            answered = sid
        prev = sid
    return answered


def prov_o(g: Graph) -> dict[str, Any]:
    """``g`` as JSON-LD in the PROV-O vocabulary: ``{"@context", "@graph": [node, …]}``,
    each node ``{"@id", "@type": [...], "prov:startedAtTime", …, "prov:<relation>":
    [{"@id"}, …], "llmroute:<attr>": value}``."""
    context: dict[str, Any] = dict(PREFIXES)
    context["llmroute:partOf"] = {"@type": "@id"}
    items = []
    for nid, n in g.nodes.items():
        obj: dict[str, Any] = {"@id": nid, "@type": [KINDS[n.kind], *n.types]}
        for name, t in (("prov:startedAtTime", n.start), ("prov:endedAtTime", n.end)):
            if t is not None:
                obj[name] = {"@value": _iso(t), "@type": "xsd:dateTime"}
        obj.update({f"llmroute:{k}": v for k, v in n.attrs.items()})
        items.append(obj)
    by_id = {obj["@id"]: obj for obj in items}
    for relation, subject, target in g.relations:
        by_id[subject].setdefault(f"prov:{relation}", []).append({"@id": target})
    return {"@context": context, "@graph": items}


def prov_json(g: Graph) -> dict[str, Any]:
    """``g`` in W3C PROV-JSON: ``{"prefix", "entity", "activity", "agent", and one map per
    relation kind used ({"_:<relation><n>": {role: id, role: id}})}``."""
    doc: dict[str, Any] = {"prefix": {k: v for k, v in PREFIXES.items()
                                      if k not in ("prov", "xsd")}}
    for nid, n in g.nodes.items():
        body: dict[str, Any] = {f"llmroute:{k}": v for k, v in n.attrs.items()}
        if n.types:
            body["prov:type"] = [{"$": t, "type": "prov:QUALIFIED_NAME"} for t in n.types]
        for name, t in (("prov:startTime", n.start), ("prov:endTime", n.end)):
            if t is not None:
                body[name] = _iso(t)
        doc.setdefault(n.kind, {})[nid] = body
    for i, (relation, subject, target) in enumerate(g.relations, 1):
        first, second = ROLES[relation]
        doc.setdefault(relation, {})[f"_:{relation}{i}"] = {first: subject, second: target}
    return doc


def _local(text: str) -> str:
    """``text`` safe as the local part of a prefixed name (percent-encoded)."""
    return quote(str(text), safe="@.-_~:")


def _scalar(v: Any) -> Any:
    return v if v is None or isinstance(v, str | int | float | bool) else None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()
