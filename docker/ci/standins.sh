#!/usr/bin/env bash
# The base images docker/Dockerfile and docker/compose.yaml name, built locally under those
# same names (no image can be pulled here): volley-ci/debian:bookworm (a debootstrap Debian
# root), rust:1.95-slim-bookworm (this machine's Rust toolchain on it), prom/prometheus:v2.42.0
# (Debian's prometheus package) and nats:2.9 (Debian's nats-server package). An image already
# there is kept. docker/ci/e2e.sh runs it; tests/run.sh runs it early, in the background, as
# it needs the network and the disk more than the cores the lints use.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DOCKER_BUILDKIT=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
began=$SECONDS
# The stand-in base has no protoc, as the public rust image has none: the build needs none.
if ! docker image inspect volley-ci/debian:bookworm >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  echo "building volley-ci/debian:bookworm (debootstrap)"
  debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$work/root" \
    http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/root" -c . | docker import - volley-ci/debian:bookworm >/dev/null
fi
if ! docker image inspect rust:1.95-slim-bookworm >/dev/null 2>&1; then
  echo "building stand-in rust:1.95-slim-bookworm (this machine's toolchain on volley-ci/debian)"
  sysroot=$(rustc --print sysroot)
  mkdir -p "$work/rust/usr/local/rust"
  cp -a "$sysroot/bin" "$sysroot/lib" "$sysroot/libexec" "$work/rust/usr/local/rust/" 2>/dev/null || cp -a "$sysroot/bin" "$sysroot/lib" "$work/rust/usr/local/rust/"
  # This network reaches crates.io through a TLS proxy whose CA the host trusts: the stand-in
  # trusts the same extra CAs (the public rust image needs nothing like it elsewhere).
  mkdir -p "$work/rust/ca"
  cp /usr/local/share/ca-certificates/*.crt "$work/rust/ca/" 2>/dev/null || true
  cat >"$work/rust/Dockerfile" <<'DOCKERFILE'
FROM volley-ci/debian:bookworm
COPY usr/local/rust /usr/local/rust
COPY ca /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin CARGO_HOME=/usr/local/cargo
DOCKERFILE
  docker build -q -t rust:1.95-slim-bookworm "$work/rust" >/dev/null
fi
if ! docker image inspect prom/prometheus:v2.42.0 >/dev/null 2>&1; then
  echo "building stand-in prom/prometheus:v2.42.0 (Debian's package)"
  docker build -q -t prom/prometheus:v2.42.0 -f docker/ci/prometheus.Dockerfile docker/ci >/dev/null
fi
if ! docker image inspect nats:2.9 >/dev/null 2>&1; then
  echo "building stand-in nats:2.9 (Debian's nats-server package)"
  docker build -q -t nats:2.9 -f docker/ci/nats.Dockerfile docker/ci >/dev/null
fi

echo "stand-in images ready ($((SECONDS - began)) s)"
