"""The semantic gate: what is being asked, how hard it is, and how sure we are.

A ``Classifier`` (see ``protocol``) turns a ``ChatRequest`` into an ``Intent`` whose label is
one of ``intents.INTENTS`` (plus intents added by config utterances). ``semantic.SemanticGate``
is the default (n-gram first stage, MiniLM second opinion, config rules as overrides;
docs/gate.md); ``rules.RulesClassifier`` is the keyword-and-structure classifier (English and
Chinese), used as evidence, as the fallback, and alone with ``gate.kind: rules``.
"""
