# Debian's ZooKeeper (3.8) on the Java 17 runtime image: the ZooKeeper of
# deploy/docker-compose.migration.yml, built by `scripts/compose-images zookeeper`
# from Debian's servers only (no Docker Hub).
#
# The container runs `zkServer.sh start-foreground` as the zookeeper user with
# /etc/zookeeper/conf/zoo.cfg. The zoo.cfg written below is a default (port 2181 on
# 127.0.0.1); a compose file mounts its own over it to pick the port. The data
# directory, /var/lib/zookeeper, is meant to be a volume.
FROM kraftwerk-java:bookworm

# Debian's `zookeeper` depends on `default-jre`, the desktop runtime: with it apt
# pulls X11, Mesa and LLVM (79 packages, ~270 MB installed) that a server never loads. The
# headless runtime already in the image is all ZooKeeper needs, so a local
# equivs-style package that depends on it and provides `default-jre` stands in
# (apt still tracks every file it installs). slf4j-simple joins the server's class
# path because Debian's scripts put no slf4j binding there: without one ZooKeeper
# logs nothing and `docker logs` would stay empty.
RUN set -eu; \
    stub=/tmp/kraftwerk-headless-default-jre; \
    mkdir -p "$stub/DEBIAN"; \
    printf '%s\n' \
        'Package: kraftwerk-headless-default-jre' \
        'Version: 1.0' \
        'Architecture: all' \
        'Maintainer: kraftwerk <root@localhost>' \
        'Depends: openjdk-17-jre-headless' \
        'Provides: default-jre' \
        'Description: default-jre satisfied by the headless Java 17 runtime' \
        ' For servers (ZooKeeper) whose package depends on default-jre but never use AWT.' \
        > "$stub/DEBIAN/control"; \
    dpkg-deb --build "$stub" "$stub.deb" >/dev/null; \
    dpkg -i "$stub.deb"; \
    rm -rf "$stub" "$stub.deb"; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zookeeper; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin; \
    test -r /usr/share/java/slf4j-simple.jar; \
    sed -i 's|^CLASSPATH="\(.*\)"$|CLASSPATH="\1:/usr/share/java/slf4j-simple.jar"|' /usr/share/zookeeper/bin/zkEnv.sh; \
    grep -q '^CLASSPATH=.*slf4j-simple.jar"$' /usr/share/zookeeper/bin/zkEnv.sh; \
    printf '%s\n' \
        '# The image default; a compose file mounts its own zoo.cfg here.' \
        'tickTime=2000' \
        'dataDir=/var/lib/zookeeper' \
        'clientPortAddress=127.0.0.1' \
        'clientPort=2181' \
        '4lw.commands.whitelist=srvr,ruok' \
        '# The admin server (Jetty, port 8080) would claim a host port under host networking.' \
        'admin.enableServer=false' \
        > /etc/zookeeper/conf/zoo.cfg; \
    # Debian links /var/lib/zookeeper/myid to a placeholder meant for an ensemble; a
    # standalone server has no id, and ZooKeeper refuses to start on the placeholder.
    rm -f /var/lib/zookeeper/myid; \
    mkdir -p /var/lib/zookeeper /var/log/zookeeper; \
    chown zookeeper:zookeeper /var/lib/zookeeper /var/log/zookeeper

# JMX stays off: nothing here reads it, and one fewer listener in a shared network namespace.
ENV JMXDISABLE=true \
    PATH=/usr/share/zookeeper/bin:$PATH
USER zookeeper
WORKDIR /var/lib/zookeeper
VOLUME /var/lib/zookeeper
EXPOSE 2181
CMD ["zkServer.sh", "start-foreground"]
