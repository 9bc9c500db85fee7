"""The semantic gate: what is being asked, how hard it is, and how sure we are.

A ``Classifier`` (see ``protocol``) turns a ``ChatRequest`` into an ``Intent`` whose label is
one of ``intents.INTENTS``. ``rules.RulesClassifier`` is the keyword-and-structure
implementation (English and Chinese); an embedding classifier may replace it as the default
and keep the rules as overrides.
"""
