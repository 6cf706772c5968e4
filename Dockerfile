# graft's worker image: graft-worker (the entrypoint) and the graft CLI.
#
#   docker build -t graft-worker .
#   docker run --rm graft-worker --help
#
# The build stage compiles static binaries with the Go toolchain go.mod asks
# for; the final stage is distroless and runs as an unprivileged user.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/graft-worker ./cmd/worker && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/graft ./cmd/starter

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/graft-worker /out/graft /usr/local/bin/
USER nonroot:nonroot
# /metrics and /healthz, when GRAFT_METRICS_ADDR binds a routable address.
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/graft-worker"]
CMD ["run"]
