# switchyard gateway image.
#
#   docker build -t switchyard:0.1.0 .                                   # every provider
#   docker build --build-arg PROVIDERS=bedrock -t switchyard:0.1.0-bedrock .
#   docker run --rm -p 8080:8080 -e GATEWAY_API_KEYS=... -e ANTHROPIC_API_KEY=... switchyard:0.1.0
#
# PROVIDERS: a comma list of anthropic, bedrock, vertex, foundry, or all (the default). Only those
# providers' SDKs are installed (the pyproject extras of the same names; anthropic needs none),
# plus redis for the shared session store and fleet for sign-in (authlib, joserfc). An image
# serves only the providers it was built for: started for another, the gateway stops with a
# one-line configuration error naming the build arg.
# (foundry with an API key needs no SDK either; its extra, azure-identity, is for Entra ID.)
#
# Two stages: the builder installs the project with the pinned dependency set (constraints.txt)
# into a virtualenv at /opt/switchyard; the final image copies only that venv onto the same slim
# base (same Python at the same path, so the venv's interpreter links stay valid). The final image
# has no compiler and no build tools, runs as an unprivileged user, and writes nothing outside
# /tmp, so it runs with a read-only root filesystem (mount a tmpfs/emptyDir at /tmp).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ARG PROVIDERS=all
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
RUN python -m venv /opt/switchyard
# Every dependency has a binary wheel for linux x86_64/aarch64, so the builder needs no compiler
# either; --only-binary keeps it that way (the project itself is pure Python and built here).
# Bytecode is compiled now, as unchecked-hash .pyc files that stay valid whatever the files'
# timestamps: at run time the root filesystem is read-only and PYTHONDONTWRITEBYTECODE is set.
# PROVIDERS is checked first: pip only warns about an unknown extra and would build an image
# without the SDK it was meant to have.
COPY pyproject.toml constraints.txt README.md ./
COPY gateway ./gateway
COPY loop ./loop
RUN set -eu; \
    providers=""; \
    IFS=','; \
    for provider in ${PROVIDERS}; do \
        case "${provider}" in \
            all|anthropic|bedrock|vertex|foundry) providers="${providers}${provider}," ;; \
            "") ;; \
            *) echo "PROVIDERS: unknown provider '${provider}' (expected a comma list of anthropic, bedrock, vertex, foundry, or all)" >&2; exit 1 ;; \
        esac; \
    done; \
    unset IFS; \
    if [ -z "${providers}" ]; then echo "PROVIDERS: empty (expected a comma list of anthropic, bedrock, vertex, foundry, or all)" >&2; exit 1; fi; \
    /opt/switchyard/bin/pip install --no-cache-dir --only-binary=:all: --no-binary=switchyard \
        --constraint constraints.txt ".[${providers}redis,fleet]" \
    && /opt/switchyard/bin/python -m compileall -q -f --invalidation-mode unchecked-hash /opt/switchyard/lib

FROM ${PYTHON_IMAGE}

# recorded on the image (docker inspect) so a deployment can check what it was built for
ARG PROVIDERS=all
LABEL io.switchyard.providers="${PROVIDERS}"

ENV PATH=/opt/switchyard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8080

RUN groupadd --system --gid 10001 switchyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin switchyard

COPY --from=builder /opt/switchyard /opt/switchyard

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080

# Liveness from inside the container (the slim base has no curl): any non-2xx or connection error
# makes urlopen raise, and the non-zero exit marks the container unhealthy.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('GATEWAY_PORT', '8080'), timeout=2)"]

# Python is PID 1 and handles SIGTERM itself: readiness fails, the listener closes, in-flight
# requests drain for up to GATEWAY_DRAIN_TIMEOUT_S, then the process exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["switchyard"]
CMD ["serve"]
