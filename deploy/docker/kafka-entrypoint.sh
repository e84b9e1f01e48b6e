#!/bin/bash
# The Apache Kafka image's entrypoint (deploy/docker/kafka.Dockerfile).
#
#   kafka-entrypoint.sh [PROPERTIES]     format the log dirs when needed, then run kafka.Kafka
#                                        (PROPERTIES defaults to /etc/kafka/server.properties)
#   kafka-entrypoint.sh probe HOST PORT  exit 0 only when HOST:PORT answers an ApiVersions
#                                        request without error (the compose healthcheck)
#
# Formatting: a log dir without meta.properties is formatted by Kafka's own StorageTool
# with the cluster id in $KAFKA_CLUSTER_ID, which must be the controllers' cluster id
# (a broker refuses a quorum of another cluster). A formatted directory is never touched.
# The server is exec'd: the JVM is the container's first process, so `docker stop`'s
# SIGTERM reaches Kafka's shutdown hook (a broker's controlled shutdown).
set -euo pipefail

KAFKA_HOME=/opt/kafka
classpath="$KAFKA_HOME/libs/*"
# Kafka logs through slf4j-simple (on the classpath) to stderr: `docker logs` shows it,
# each line with a time so it lines up with the kraftwerk controllers' JSON logs.
log_opts=(-Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS)

java_run() {  # main class, arguments...
    # Word splitting of the *_OPTS variables is intended: each holds several options.
    # shellcheck disable=SC2086
    exec java ${KAFKA_HEAP_OPTS:-} ${KAFKA_JVM_PERFORMANCE_OPTS:-} ${KAFKA_OPTS:-} "${log_opts[@]}" \
        -cp "$classpath" "$@"
}

property() {  # file, key: the last value set for key (Kafka's properties: key=value lines)
    sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*//p" "$1" | tail -n 1
}

log_dirs() {  # file: the broker's log directories, one a line (log.dirs, else log.dir)
    local dirs
    dirs="$(property "$1" 'log\.dirs')"
    [ -n "$dirs" ] || dirs="$(property "$1" 'log\.dir')"
    [ -n "$dirs" ] || dirs=/tmp/kafka-logs  # Kafka's default
    tr ',' '\n' <<<"$dirs" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//' | grep -v '^$'
}

needs_format() {  # file: true when some log dir has no meta.properties yet
    local dir
    while read -r dir; do
        [ -f "$dir/meta.properties" ] || return 0
    done < <(log_dirs "$1")
    return 1
}

probe() {  # host, port
    local host="$1" port="$2" reply
    exec 3<>"/dev/tcp/$host/$port" || return 1
    # ApiVersions (key 18) v0, request header v1: api key, api version 0, correlation id
    # 0x6b770001, client id "probe"; no body. 15 bytes after the length prefix.
    printf '\x00\x00\x00\x0f\x00\x12\x00\x00\x6b\x77\x00\x01\x00\x05probe' >&3
    # The answer starts: length (4 bytes), correlation id (4), error code (2). A broker
    # accepts connections before it serves them (its listener is bound while it still
    # catches up and waits to be unfenced): no answer within 4 s is "not ready".
    reply="$(timeout 4 head -c 10 <&3 | od -An -v -tx1 | tr -d ' \n')" || true
    exec 3<&-
    [ "${reply:8:8}" = "6b770001" ] && [ "${reply:16:4}" = "0000" ]
}

if [ "${1:-}" = "probe" ]; then
    [ "$#" = 3 ] || { echo "usage: kafka-entrypoint.sh probe HOST PORT" >&2; exit 2; }
    probe "$2" "$3"
    exit
fi

properties="${1:-/etc/kafka/server.properties}"
[ -r "$properties" ] || { echo "kafka-entrypoint: cannot read $properties" >&2; exit 2; }

if needs_format "$properties"; then
    if [ -z "${KAFKA_CLUSTER_ID:-}" ]; then
        echo "kafka-entrypoint: $properties names an unformatted log dir and KAFKA_CLUSTER_ID is not set" \
             "(it must be the controllers' cluster id)" >&2
        exit 2
    fi
    echo "kafka-entrypoint: formatting the log dirs of $properties for cluster $KAFKA_CLUSTER_ID" >&2
    # --ignore-formatted: of several log dirs, the ones already formatted are kept as they are.
    # A subshell: java_run execs, and the server starts after the format has finished.
    ( java_run kafka.tools.StorageTool format --cluster-id "$KAFKA_CLUSTER_ID" --config "$properties" \
        --ignore-formatted )
fi

java_run kafka.Kafka "$properties"
