# syntax=docker/dockerfile:1
#
# One image carries all four Fenceline binaries:
#   /fenceline-attacher    the CSI external-attacher replacement (default entrypoint)
#   /fenceline-controller  the pod-GC companion controller
#   /fenceline-fence-agent the fence agent (BMC credentials, FenceTarget probe)
#   /mock-driver           the mock CSI driver used by the examples and tests
# Pick one per container with `command: ["/fenceline-controller"]` (see docs/deploy.md).
#
# The builder is pinned to an exact Go patch release on Debian 12 (bookworm), so
# rebuilding an old tag uses the same toolchain as the one that was released.
# Pin further by digest when mirroring: golang:1.26.8-bookworm@sha256:<digest>.
FROM golang:1.26.8-bookworm AS build

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
ARG VERSION=dev

# The same target CI runs. It builds static binaries (CGO_ENABLED=0) into bin/.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    make build VERSION="${VERSION}"

# distroless/static has no shell, no package manager and no libc: the binaries are
# static, and the :nonroot variant already defaults to uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /src/bin/fenceline-attacher /src/bin/fenceline-controller /src/bin/fenceline-fence-agent /src/bin/mock-driver /

# Numeric user, so that Kubernetes' runAsNonRoot check can verify it without /etc/passwd.
USER 65532:65532

# Upstream's csi-attacher image starts the attacher by default; so does this one,
# which lets an existing sidecar switch by changing only its image.
ENTRYPOINT ["/fenceline-attacher"]
