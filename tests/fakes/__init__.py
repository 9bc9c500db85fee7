"""Fakes at real seams: a scripted OpenAI-compatible upstream served on loopback, and a
fake clock for code that takes an injected clock and sleep."""
