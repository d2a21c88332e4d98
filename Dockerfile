# syntax=docker/dockerfile:1
#
# One image per component, each a target of this file:
#
#   target        image                   what it runs
#   attacher      fenceline-attacher      the CSI external-attacher replacement (default target)
#   controller    fenceline-controller    pod GC, node fencing, taint eviction
#   fence-agent   fenceline-fence-agent   the fence agent, with Debian's fence-agents and ipmitool
#   mock-driver   fenceline-mock-driver   the mock CSI driver, for tests and demos only
#
# `make image` builds all four (docs/deploy.md). `docker build .` without
# --target builds the attacher, the last stage, as upstream's csi-attacher
# image starts the attacher, so that swapping that image keeps working.
#
# Multi-arch: the builder runs on the build machine's platform and
# cross-compiles for each target platform, e.g.
#   docker buildx build --platform linux/amd64,linux/arm64 --target controller .
#
# Every base is pinned to a release: the builder to an exact Go patch release,
# the runtimes to Debian 12 (bookworm). Pin further by digest when mirroring,
# e.g. debian:bookworm-slim@sha256:<digest>; `docker buildx imagetools inspect
# debian:bookworm-slim` prints the digest of the multi-arch index.

# The OCI labels' values; `make image` sets them from git.
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://fenceline.io/fenceline

# The builder is pinned to an exact Go patch release, so rebuilding an old tag
# uses the toolchain it was released with.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build

WORKDIR /src

# Download modules in their own layer: it is rebuilt only when go.mod/go.sum change.
# The fence extension is a nested module that go.mod replaces with ./pkg/fence,
# so its go.mod/go.sum are needed to resolve the module graph.
COPY go.mod go.sum ./
COPY pkg/fence/go.mod pkg/fence/go.sum ./pkg/fence/
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .

# VERSION is stamped into the binaries; the build context has no .git directory,
# so pass it explicitly: docker build --build-arg VERSION=$(git describe --tags --always) .
ARG VERSION
# Set by BuildKit for the platform being built; empty means this machine's.
ARG TARGETOS
ARG TARGETARCH

# The same target CI runs. It builds static binaries (CGO_ENABLED=0) into bin/,
# for TARGETOS/TARGETARCH: no emulation is needed to compile for another platform.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS="${TARGETOS}" GOARCH="${TARGETARCH}" make build VERSION="${VERSION}"

# The runtime of the Go-only images: distroless/static has no shell, no
# package manager and no libc, which static binaries do not need.
FROM gcr.io/distroless/static-debian12:nonroot AS static
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Numeric user, so that Kubernetes' runAsNonRoot check can verify it without /etc/passwd.
USER 65532:65532

FROM static AS controller
LABEL org.opencontainers.image.title="fenceline-controller" \
      org.opencontainers.image.description="Fenceline controller: force-deletes pods stuck on dead nodes and fences dead nodes before their volumes move"
COPY --from=build /src/bin/fenceline-controller /
ENTRYPOINT ["/fenceline-controller"]

FROM static AS mock-driver
LABEL org.opencontainers.image.title="fenceline-mock-driver" \
      org.opencontainers.image.description="Fenceline mock CSI driver with fencing, for tests and demos only"
COPY --from=build /src/bin/mock-driver /
ENTRYPOINT ["/mock-driver"]

# The fence agent's exec method runs ClusterLabs fence agents from /usr/sbin
# (docs/fencing-methods.md), so this image is Debian with fence-agents, and
# ipmitool, which fence_ipmilan runs but the package does not depend on.
FROM debian:bookworm-slim AS fence-agent
RUN apt-get update \
    && apt-get install -y --no-install-recommends fence-agents ipmitool \
    && rm -rf /var/lib/apt/lists/*
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.title="fenceline-fence-agent" \
      org.opencontainers.image.description="Fenceline fence agent: probes BMCs and powers dead nodes off through Redfish, IPMI or ClusterLabs fence agents"
COPY --from=build /src/bin/fenceline-fence-agent /
# Numeric, as in the other images; fence_ipmilan and fence_redfish run as
# this uid without a passwd entry.
USER 65532:65532
ENTRYPOINT ["/fenceline-fence-agent"]

# Last, so that `docker build .` without --target builds it.
FROM static AS attacher
LABEL org.opencontainers.image.title="fenceline-attacher" \
      org.opencontainers.image.description="Fenceline attacher: drop-in replacement for the kubernetes-csi external-attacher that detaches from dead nodes with a fence"
COPY --from=build /src/bin/fenceline-attacher /
ENTRYPOINT ["/fenceline-attacher"]
