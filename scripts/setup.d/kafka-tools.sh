# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Resolves Apache Kafka's command-line tools (org.apache.kafka:kafka-tools, pinned by
# interop/pom.xml's kafka-tools profile, with everything its main classes need) into ~/.m2
# and writes their classpath to interop/target/tools-classpath.txt for tests/interop/.
# Only dependency:build-classpath runs (no compile, no package): the AdminClient driver's
# interop/target/classes and classpath.txt are never touched, so a driver build may run
# beside it. Idempotent: resolves again only when the pom is newer than the classpath file.

kafka_tools_setup() {
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "setup: java/mvn missing; the Kafka CLI tool tests (tests/interop) skip (and fail with CI=true)"
        return 0
    fi
    local classpath=interop/target/tools-classpath.txt
    if [ -s "$classpath" ] && [ ! interop/pom.xml -nt "$classpath" ]; then
        echo "setup: Kafka CLI tools classpath up to date ($classpath)"
        return 0
    fi
    echo "setup: resolving Apache Kafka's CLI tools (interop/pom.xml profile kafka-tools, Maven)"
    mkdir -p interop/target
    local log=interop/target/setup-kafka-tools.log
    # Written to a temporary name first: a classpath file exists only when the whole
    # resolution succeeded (the tests skip rather than run with a partial classpath).
    if mvn -q -B -f interop/pom.xml -P kafka-tools dependency:build-classpath \
            -Dmdep.outputFile=target/tools-classpath.txt.tmp >"$log" 2>&1 \
            && [ -s "$classpath.tmp" ]; then
        mv -f "$classpath.tmp" "$classpath"
        echo "setup: Kafka CLI tools resolved ($classpath)"
    else
        tail -n 40 "$log" >&2 || true
        rm -f "$classpath" "$classpath.tmp"
        echo "setup: could not resolve Kafka's CLI tools (see $log); tests/interop skip (and fail with CI=true)"
    fi
}
kafka_tools_setup
unset -f kafka_tools_setup
