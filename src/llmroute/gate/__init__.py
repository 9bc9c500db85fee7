"""The semantic gate: what is being asked, how hard it is, and how sure we are.

A ``Gate`` (see ``protocol``) turns a ``ChatRequest`` into an ``Intent`` whose label is one
of ``intents.INTENTS`` (plus intents added by config utterances), through one async entry
point, ``await gate.classify(request)``. ``semantic.SemanticGate`` is the default (n-gram
first stage, fine-tuned multilingual encoder second opinion, config rules as overrides; docs/gate.md);
``rules.RulesClassifier`` is the keyword-and-structure classifier (English and Chinese),
used as evidence, as the fallback, and alone (``rules.RulesGate``) with ``gate.kind: rules``.
One complexity formula (``complexity``), one verdict builder (``verdict.make_intent``), one
softmax (``probs``) and one home for the shared numbers (``constants``) serve them all.
"""
