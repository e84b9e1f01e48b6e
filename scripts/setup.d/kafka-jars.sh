# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Resolves Apache Kafka's jars (pinned by interop/pom.xml's profiles) into ~/.m2 and
# writes each classpath to interop/target/ for the tests that run them:
#   kafka-tools    org.apache.kafka:kafka-tools, the CLI tools' main classes
#                  -> tools-classpath.txt (tests/interop/)
#   broker-catalog org.apache.kafka:kafka_2.13, the server (kafka.Kafka, kafka.tools.StorageTool)
#                  -> server-classpath.txt (tests/kafka_peer/: real Kafka brokers and controllers)
# Only dependency:build-classpath runs (no compile, no package): the AdminClient driver's
# interop/target/classes and classpath.txt are never touched, so a driver build may run
# beside it. Idempotent: a classpath is resolved again only when the pom is newer.

kafka_classpath_setup() {
    local profile=$1 name=$2 what=$3 tests=$4
    local classpath=interop/target/$name
    if [ -s "$classpath" ] && [ ! interop/pom.xml -nt "$classpath" ]; then
        echo "setup: $what classpath up to date ($classpath)"
        return 0
    fi
    echo "setup: resolving $what (interop/pom.xml profile $profile, Maven)"
    mkdir -p interop/target
    local log=interop/target/setup-$profile.log
    # Written to a temporary name first: a classpath file exists only when the whole
    # resolution succeeded (the tests skip rather than run with a partial classpath).
    if mvn -q -B -f interop/pom.xml -P "$profile" dependency:build-classpath \
            -Dmdep.outputFile="target/$name.tmp" >"$log" 2>&1 && [ -s "$classpath.tmp" ]; then
        mv -f "$classpath.tmp" "$classpath"
        echo "setup: $what resolved ($classpath)"
    else
        tail -n 40 "$log" >&2 || true
        rm -f "$classpath" "$classpath.tmp"
        echo "setup: $what missing; could not resolve it (see $log); $tests skip (and fail with CI=true)"
    fi
}

if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
    kafka_classpath_setup kafka-tools tools-classpath.txt "Apache Kafka's CLI tools" tests/interop
    kafka_classpath_setup broker-catalog server-classpath.txt "Apache Kafka's server" tests/kafka_peer
else
    echo "setup: java/mvn missing; the Kafka CLI tool and Kafka peer tests (tests/interop, tests/kafka_peer) skip (and fail with CI=true)"
fi
unset -f kafka_classpath_setup
