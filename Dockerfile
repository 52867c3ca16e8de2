# The agenthold server image: the static server and the static sandboxd, nothing else.
#
# Built from local artifacts only (no registry, no network during the build); the script does
# all of it, tag agenthold:dev unless given another (tests/docker_in_container.rs runs that):
#   scripts/build-server-image.sh [TAG]
# or by hand:
#   scripts/build-sandboxd.sh
#   RUSTFLAGS='-C target-feature=+crt-static' cargo build --release \
#       --target x86_64-unknown-linux-gnu --bin agenthold
#   docker build -t agenthold:dev .
#
# Run it with the engine's socket, a data volume and the API port on the host's loopback:
#   docker run -d --name agenthold -v /var/run/docker.sock:/var/run/docker.sock \
#       -v agenthold-data:/data -p 127.0.0.1:8080:8080 -p 127.0.0.1:8081:8081 agenthold:dev
# The server finds its own container, copies /sandboxd into the `agenthold-sandboxd` volume and
# joins every agent network at .2, where sandboxes dial the tunnel (port 8090, never published).
# It makes the agent networks without a host address on their bridges, so sandboxes cannot reach
# the host, though the server cannot add host firewall rules from in here.
#
# Both binaries are linked statically against glibc, so the image has no libc and no NSS: the
# server reaches Docker over the socket and sandboxes by address, and makes no name lookups.
FROM scratch
COPY target/x86_64-unknown-linux-gnu/release/agenthold /agenthold
COPY target/sandboxd/sandboxd /sandboxd
COPY scripts/container-config.yaml /etc/agenthold/config.yaml
VOLUME ["/data"]
EXPOSE 8080 8081
ENTRYPOINT ["/agenthold"]
CMD ["serve", "--config", "/etc/agenthold/config.yaml"]
