# Apache Kafka 4.4.0's server (`kafka.Kafka`) on the Java 17 image, built without Docker
# Hub: scripts/compose-images copies the jars Maven resolved for interop/pom.xml's
# broker-catalog profile (interop/target/server-classpath.txt) into the build context's
# libs/, with kafka-entrypoint.sh beside them. deploy/docker-compose.kafka.yml runs it
# as process.roles=broker against kraftwerk controllers.
FROM kraftwerk-java:bookworm
COPY libs/ /opt/kafka/libs/
COPY kafka-entrypoint.sh /opt/kafka/bin/kafka-entrypoint.sh
RUN chmod 0755 /opt/kafka/bin/kafka-entrypoint.sh && mkdir -p /var/lib/kafka /etc/kafka
# A test cluster on a small machine: three brokers beside three controllers on two cores.
# Kafka's own scripts read the same two variables, so a user overrides them the same way.
ENV KAFKA_HEAP_OPTS="-Xmx512m" \
    KAFKA_JVM_PERFORMANCE_OPTS="-XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError"
EXPOSE 9092
ENTRYPOINT ["/opt/kafka/bin/kafka-entrypoint.sh"]
CMD ["/etc/kafka/server.properties"]
