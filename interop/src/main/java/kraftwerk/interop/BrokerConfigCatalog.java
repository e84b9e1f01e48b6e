package kraftwerk.interop;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;

import java.io.FileDescriptor;
import java.io.IOException;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.common.config.ConfigDef;

/**
 * Prints, as one JSON document on stdout, what Apache Kafka's own broker knows about every broker
 * config key: its type, its default as DescribeConfigs renders it, whether it can be changed
 * dynamically (per broker, cluster-wide, or not at all) and whether it is sensitive.
 * tools/gen_broker_configs.py turns the document into server/controller/broker_config_catalog.py.
 *
 * <p>The broker's definitions live in Kafka's server jars (kafka-server, kafka_2.13), which only
 * the {@code broker-catalog} Maven profile puts on the classpath. This class reaches them by
 * reflection, so it compiles against kafka-clients alone and the default build (the client-matrix
 * driver) needs nothing more. Rules it keeps: keys are sorted, so the same Kafka release always
 * prints the same bytes; a class or member that cannot be found fails the run instead of
 * printing a partial catalogue.
 */
public final class BrokerConfigCatalog {

    /** Kafka's broker definition: KafkaConfig.configDef() in core, AbstractKafkaConfig.CONFIG_DEF in kafka-server. */
    private static final String KAFKA_CONFIG = "kafka.server.KafkaConfig";
    private static final String ABSTRACT_KAFKA_CONFIG = "org.apache.kafka.server.config.AbstractKafkaConfig";
    /** Which keys a broker accepts at run time, and at which level (per-broker or cluster-wide). */
    private static final String DYNAMIC_BROKER_CONFIG = "org.apache.kafka.server.config.DynamicBrokerConfig";
    private static final String DYNAMIC_CONFIG_BROKER = "org.apache.kafka.server.config.DynamicConfig$Broker";

    private BrokerConfigCatalog() {
    }

    public static void main(String[] argv) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        // A library's stray print must not end up inside the JSON document.
        System.setOut(System.err);
        ObjectMapper json = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT)
                .enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS);
        out.println(json.writeValueAsString(catalog()));
        out.flush();
    }

    static Map<String, Object> catalog() throws ReflectiveOperationException, IOException {
        Definition broker = brokerConfigDef();
        ConfigDef definition = broker.configDef();
        Map<String, String> modes = updateModes();
        Class<?> dynamic = Class.forName(DYNAMIC_BROKER_CONFIG);
        Method synonymsOf = dynamic.getMethod("brokerConfigSynonyms", String.class, boolean.class);

        Map<String, Object> keys = new TreeMap<>();
        for (ConfigDef.ConfigKey key : definition.configKeys().values()) {
            // Kafka's broker lists every key of its definition except the internal ones
            // (AbstractConfig.nonInternalValues); others appear only when someone set them.
            keys.put(key.name, describe(key, modes, synonymsOf, !key.internalConfig));
        }
        // Dynamic keys outside KafkaConfig's definition (the broker-level replication quotas)
        // are typed by DynamicConfig.Broker, as Kafka's broker types them.
        @SuppressWarnings("unchecked")
        Map<String, ConfigDef.ConfigKey> dynamicOnly = (Map<String, ConfigDef.ConfigKey>)
                Class.forName(DYNAMIC_CONFIG_BROKER).getMethod("configKeys").invoke(null);
        for (String name : modes.keySet()) {
            if (keys.containsKey(name)) {
                continue;
            }
            ConfigDef.ConfigKey key = dynamicOnly.get(name);
            if (key == null) {
                throw new IllegalStateException("dynamic broker config without a definition: " + name);
            }
            keys.put(name, describe(key, modes, synonymsOf, false));
        }

        Map<String, Object> document = new LinkedHashMap<>();
        document.put("kafka_version", clientsVersion());
        document.put("jar", broker.jar());
        document.put("definition", broker.source());
        document.put("keys", keys);
        return document;
    }

    private static Map<String, Object> describe(ConfigDef.ConfigKey key, Map<String, String> modes,
                                                Method synonymsOf, boolean listed)
            throws ReflectiveOperationException {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("type", key.type.name());
        boolean sensitive = key.type == ConfigDef.Type.PASSWORD;
        boolean required = key.defaultValue == ConfigDef.NO_DEFAULT_VALUE;
        entry.put("has_default", !required);
        // DescribeConfigs renders a parsed value with ConfigDef.convertToString; a sensitive
        // one is never shown.
        entry.put("default", required || sensitive ? null : ConfigDef.convertToString(key.defaultValue, key.type));
        entry.put("dynamic", modes.getOrDefault(key.name, "read-only"));
        entry.put("sensitive", sensitive);
        entry.put("listed", listed);
        @SuppressWarnings("unchecked")
        List<String> synonyms = new ArrayList<>((Collection<String>) synonymsOf.invoke(null, key.name, false));
        entry.put("synonyms", synonyms);
        return entry;
    }

    /** The broker's ConfigDef and where it was found (printed, so a reader knows which one). */
    private record Definition(ConfigDef configDef, String source, String jar) {
    }

    /**
     * The jar a class came from (its file name only, so the output does not depend on where
     * Maven keeps its repository): the name carries the release, e.g. kafka_2.13-4.4.0.jar.
     */
    private static String versionOf(Class<?> type) {
        String location = type.getProtectionDomain().getCodeSource().getLocation().getPath();
        return location.substring(location.lastIndexOf('/') + 1);
    }

    private static Definition brokerConfigDef() throws ReflectiveOperationException {
        try {
            Class<?> type = Class.forName(KAFKA_CONFIG);
            Object def = type.getMethod("configDef").invoke(null);
            return new Definition((ConfigDef) def, KAFKA_CONFIG + ".configDef()", versionOf(type));
        } catch (ClassNotFoundException | NoSuchMethodException e) {
            // Without kafka_2.13 on the classpath: the same definition, from kafka-server.
            Class<?> type = Class.forName(ABSTRACT_KAFKA_CONFIG);
            Object def = type.getField("CONFIG_DEF").get(null);
            return new Definition((ConfigDef) def, ABSTRACT_KAFKA_CONFIG + ".CONFIG_DEF", versionOf(type));
        }
    }

    /** The release kafka-clients reports for itself (the same pinned release as the server jars). */
    private static String clientsVersion() throws IOException {
        Properties props = new Properties();
        try (InputStream in = ConfigDef.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in == null) {
                throw new IllegalStateException("kafka-clients has no kafka/kafka-version.properties");
            }
            props.load(in);
        }
        return props.getProperty("version");
    }

    @SuppressWarnings("unchecked")
    private static Map<String, String> updateModes() throws ReflectiveOperationException {
        Object modes = Class.forName(DYNAMIC_BROKER_CONFIG).getMethod("dynamicConfigUpdateModes").invoke(null);
        return new TreeMap<>((Map<String, String>) modes);
    }
}
