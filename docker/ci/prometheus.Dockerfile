# CI stand-in for prom/prometheus (which cannot be pulled here): Debian's prometheus package
# on a Debian root made with debootstrap, with the official image's entrypoint and user, and
# wget (the official image has busybox's) for the compose file's healthcheck.
FROM volley-ci/debian:bookworm
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus wget >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
ENTRYPOINT ["/usr/bin/prometheus"]
