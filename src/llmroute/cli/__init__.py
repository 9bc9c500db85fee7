"""The command line: `llmroute serve | demo | classify | gate | backends | decide | bench | emulate`,
one module per command group; `main` (in ``main.py``) is the entry point."""
