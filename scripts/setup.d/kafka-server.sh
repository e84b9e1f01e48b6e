# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Resolves Apache Kafka's broker (org.apache.kafka:kafka_2.13, pinned by interop/pom.xml's
# broker-catalog profile, with kafka-server, kafka-storage, kafka-metadata, scala-library,
# ...) into ~/.m2 and writes its classpath to interop/target/server-classpath.txt for
# tests/kafka_peer/ (real Kafka brokers on a kraftwerk controller quorum: kafka.Kafka and
# kafka.tools.StorageTool). Only dependency:build-classpath runs (no compile, no package):
# the driver's interop/target/classes and the other classpath files are never touched.
# Idempotent: resolves again only when the pom is newer than the classpath file.

kafka_server_setup() {
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "setup: java/mvn missing; the real Kafka broker tests (tests/kafka_peer) skip (and fail with CI=true)"
        return 0
    fi
    local classpath=interop/target/server-classpath.txt
    if [ -s "$classpath" ] && [ ! interop/pom.xml -nt "$classpath" ]; then
        echo "setup: Kafka server classpath up to date ($classpath)"
        return 0
    fi
    echo "setup: resolving Apache Kafka's broker (interop/pom.xml profile broker-catalog, Maven)"
    mkdir -p interop/target
    local log=interop/target/setup-kafka-server.log
    # Written to a temporary name first: a classpath file exists only when the whole
    # resolution succeeded (the tests skip rather than run with a partial classpath).
    if mvn -q -B -f interop/pom.xml -P broker-catalog dependency:build-classpath \
            -Dmdep.outputFile=target/server-classpath.txt.tmp >"$log" 2>&1 \
            && [ -s "$classpath.tmp" ]; then
        mv -f "$classpath.tmp" "$classpath"
        echo "setup: Kafka server resolved ($classpath)"
    else
        tail -n 40 "$log" >&2 || true
        rm -f "$classpath" "$classpath.tmp"
        echo "setup: Kafka server missing; could not resolve it (see $log); tests/kafka_peer skip (and fail with CI=true)"
    fi
}
kafka_server_setup
unset -f kafka_server_setup
