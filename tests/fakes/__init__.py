"""Fakes at real seams: a scripted OpenAI-compatible upstream served on loopback."""
