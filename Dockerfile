# syntax=docker/dockerfile:1
# tqserve container image: Debian 12, CPU only (a CUDA variant comes with the CUDA kernels; see docs/deploy.md).
#
#   docker build -t tqserve .                          # the model is fetched at first start into /var/lib/tqserve/models
#   docker build -t tqserve --build-arg BAKE_MODEL=1 . # the default model is baked into the image (no Python inside)
#   docker run --rm -p 8080:8080 -p 50051:50051 --stop-timeout 45 \
#     -v tqserve-models:/var/lib/tqserve/models -v tqserve-cold:/var/lib/tqserve/cold tqserve
#
# The builder runs exactly the scripts CI runs (scripts/install-deps.sh, scripts/build.sh); scripts/validate-deploy.sh
# fails if that changes, and checks the runtime package list below against `ldd build/tqserve`.

ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

FROM ${DEBIAN_IMAGE} AS builder
ARG BAKE_MODEL=0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# The package step only depends on this one script, so source edits keep its layer cached.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Tests and benchmarks are CI's job; the image needs the daemon only.
RUN --mount=type=cache,target=/root/.cache/tqserve/ccache \
    bash scripts/build.sh -DTQ_BUILD_TESTS=OFF -DTQ_BUILD_BENCH=OFF \
    && install -D -m 0755 build/tqserve /out/bin/tqserve \
    && /out/bin/tqserve --version
# BAKE_MODEL=1: fetch the default model now, the way the runtime image would (scripts/fetch-model.sh checks its
# sha256; the image's python-env.sh stand-in needs only pip, not the test packages); else /out/models stays empty.
RUN mkdir -p /out/models \
    && if [ "${BAKE_MODEL}" = 1 ]; then \
         mkdir -p /tmp/fetch && cp scripts/fetch-model.sh deploy/docker/python-env.sh /tmp/fetch/ \
         && python3 -m venv /tmp/fetch/venv \
         && TQSERVE_VENV=/tmp/fetch/venv TQ_MODEL_DIR=/out/models bash /tmp/fetch/fetch-model.sh \
         && rm -rf /tmp/fetch; \
       fi

FROM ${RUNTIME_IMAGE} AS runtime
ARG BAKE_MODEL=0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Runtime libraries of build/tqserve, from `ldd build/tqserve` mapped to Debian packages (libc6 and libgcc-s1 are in
# the base image). liburing2 is for the cold tier's io_uring backend. Python (python3-venv) is only there to fetch
# the model at start; a baked image leaves it out.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       libabsl20220623 libc-ares2 libfmt9 libgrpc++1.51 libgrpc29 libhwy1 libprometheus-cpp-core1.0 \
       libprotobuf32 libre2-9 libspdlog1.10 libssl3 libstdc++6 libyaml-cpp0.7 zlib1g \
       liburing2 ca-certificates \
    && if [ "${BAKE_MODEL}" != 1 ]; then apt-get install -y --no-install-recommends python3 python3-venv; fi \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tqserve \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tqserve --shell /usr/sbin/nologin tqserve \
    && mkdir -p /var/lib/tqserve/models /var/lib/tqserve/cold /etc/tqserve \
    && chown -R 10001:10001 /var/lib/tqserve
COPY --from=builder /out/bin/tqserve /usr/local/bin/tqserve
COPY --from=builder /out/models/ /opt/tqserve/models/
COPY scripts/fetch-model.sh /opt/tqserve/scripts/fetch-model.sh
COPY deploy/docker/python-env.sh /opt/tqserve/scripts/python-env.sh
COPY scripts/docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
# Every shared library resolves, and the binary runs, or the build fails here.
RUN if ldd /usr/local/bin/tqserve | grep 'not found'; then exit 1; fi \
    && /usr/local/bin/tqserve --version \
    && if [ "${BAKE_MODEL}" != 1 ]; then python3 -m venv /opt/tqserve/venv; fi

USER 10001:10001
# The cold tier in the cold volume (a directory the daemon creates 0700 inside it; the default would be under HOME).
ENV HOME=/var/lib/tqserve \
    TQ_MODEL_DIR=/var/lib/tqserve/models \
    TQ_KV_COLD_DIR=/var/lib/tqserve/cold/kv \
    TQSERVE_VENV=/opt/tqserve/venv \
    PIP_NO_CACHE_DIR=1
WORKDIR /var/lib/tqserve
# models: the fetched model (kept across restarts when this is a named volume); cold: the KV cache's NVMe tier.
VOLUME ["/var/lib/tqserve/models", "/var/lib/tqserve/cold"]
EXPOSE 8080 50051
# Liveness only: /health is 200 while the engine lives (readiness, /ready, is for load balancers and Kubernetes).
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 CMD ["/usr/local/bin/docker-entrypoint.sh", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["serve"]
