# CI stand-in for the official nats image (which cannot be pulled here): Debian's nats-server
# package on a Debian root made with debootstrap, listening on 4222 like the official one.
FROM volley-ci/debian:bookworm
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server >/dev/null \
    && rm -rf /var/lib/apt/lists/*
USER nobody
EXPOSE 4222
ENTRYPOINT ["/usr/sbin/nats-server"]
CMD ["-a", "0.0.0.0", "-p", "4222"]
