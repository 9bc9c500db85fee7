"""Router-side statistics, pushed by dispatch (not polled): in-flight, latency and error
windows, tokens/s, pending prefill."""
