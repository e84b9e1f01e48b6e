# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Builds interop/, the client-matrix driver for Apache Kafka's Java AdminClient. Maven
# resolves the pinned kafka-clients (and its few dependencies) into ~/.m2; nothing of
# Kafka's enters the repository. The driver then runs as
#   java -cp interop/target/classes:$(cat interop/target/classpath.txt) kraftwerk.interop.AdminDriver ...
# Idempotent: rebuilds only when the class file is missing or older than the pom or a source.

java_clients_setup() {
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "setup: java/mvn missing; the Java AdminClient matrix tests skip (and fail with CI=true)"
        return 0
    fi
    local class=interop/target/classes/kraftwerk/interop/AdminDriver.class
    local classpath=interop/target/classpath.txt
    local stale=0
    if [ ! -f "$class" ] || [ ! -s "$classpath" ] || [ interop/pom.xml -nt "$class" ]; then
        stale=1
    elif [ -n "$(find interop/src -newer "$class" -type f -print -quit)" ]; then
        stale=1
    fi
    if [ "$stale" = 0 ]; then
        echo "setup: Java AdminClient driver up to date (interop/target)"
        return 0
    fi
    echo "setup: building the Java AdminClient driver (interop/, Maven)"
    mkdir -p interop/target
    local log=interop/target/setup-build.log
    # -Dmdep.outputFile is relative to the project: interop/target/classpath.txt. Maven's
    # own output goes to a log, shown only when the build fails.
    if mvn -q -B -f interop/pom.xml package dependency:build-classpath \
            -Dmdep.outputFile=target/classpath.txt >"$log" 2>&1; then
        # The compiler keeps old timestamps on unchanged classes: mark the build as done now.
        touch "$class"
        echo "setup: Java AdminClient driver built"
    else
        tail -n 40 "$log" >&2 || true
        # No half-built driver: without the class file the tests skip instead of running stale code.
        rm -f "$class"
        echo "setup: could not build the Java AdminClient driver (see $log); its tests skip (and fail with CI=true)"
    fi
}
java_clients_setup
unset -f java_clients_setup
