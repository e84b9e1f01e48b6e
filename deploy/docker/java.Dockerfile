# A Java 17 runtime (Debian bookworm's headless OpenJDK) on the debootstrap base
# (scripts/compose-images): the base of the ZooKeeper and Apache Kafka images.
FROM kraftwerk-base:bookworm
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
