package kraftwerk.interop;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.kafka.common.config.ConfigDef;

/**
 * Prints, as one JSON document on stdout, what Apache Kafka's server-common classes say about
 * feature flags: every {@code MetadataVersion} (its level, release version string, whether it is
 * production-ready, whether it changed the metadata format, and the record versions and gates it
 * implies), and every production {@code Feature} with its levels, each level's bootstrap
 * metadata.version and dependencies, the production and testing maxima, and the default level
 * Kafka's storage tool picks for every metadata.version. tools/gen_feature_catalog.py turns the
 * document into server/controller/kafka_feature_catalog.py.
 *
 * <p>The dependency check's wording is recorded by running Kafka's own
 * {@code Feature.validateVersion} on inputs that must fail (a dependency missing, and one a level
 * too low), so kraftwerk can compare its messages with Kafka's without carrying Kafka's code.
 *
 * <p>kafka-server-common is only on the classpath with the {@code broker-catalog} Maven profile; the
 * class reaches it by reflection, so the default build compiles against kafka-clients alone. Rules
 * it keeps: output order is fixed (enum order for versions and levels, sorted maps elsewhere), so
 * the same release prints the same bytes; a missing class or member fails the run.
 */
public final class FeatureCatalog {

    private static final String METADATA_VERSION = "org.apache.kafka.server.common.MetadataVersion";
    private static final String FEATURE = "org.apache.kafka.server.common.Feature";
    private static final String FEATURE_VERSION = "org.apache.kafka.server.common.FeatureVersion";

    /** MetadataVersion's per-level answers worth recording: the record versions it writes. */
    private static final String[] RECORD_VERSIONS = {
        "registerBrokerRecordVersion", "registerControllerRecordVersion", "partitionRecordVersion",
        "partitionChangeRecordVersion", "fetchRequestVersion", "listOffsetRequestVersion",
    };

    private FeatureCatalog() {
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        // A library's stray print must not end up inside the JSON document.
        System.setOut(System.err);
        ObjectMapper json = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        out.println(json.writeValueAsString(catalog()));
        out.flush();
    }

    static Map<String, Object> catalog() throws ReflectiveOperationException, IOException {
        Class<?> mvType = Class.forName(METADATA_VERSION);
        Object[] versions = mvType.getEnumConstants();
        List<Object> mvs = new ArrayList<>();
        for (Object mv : versions) {
            mvs.add(describeMetadataVersion(mvType, mv));
        }
        Object latestTesting = mvType.getMethod("latestTesting").invoke(null);
        Object latestProduction = mvType.getField("LATEST_PRODUCTION").get(null);
        Object minimum = mvType.getField("MINIMUM_VERSION").get(null);

        Class<?> featureType = Class.forName(FEATURE);
        @SuppressWarnings("unchecked")
        List<Object> production = (List<Object>) featureType.getField("PRODUCTION_FEATURES").get(null);
        List<Object> features = new ArrayList<>();
        for (Object feature : production) {
            features.add(describeFeature(featureType, feature, versions));
        }

        Map<String, Object> document = new LinkedHashMap<>();
        document.put("kafka_version", clientsVersion());
        document.put("jar", jarOf(mvType));
        document.put("metadata_version_feature", mvType.getField("FEATURE_NAME").get(null));
        document.put("minimum_metadata_version", mvType.getMethod("version").invoke(minimum));
        document.put("latest_production_metadata_version", mvType.getMethod("version").invoke(latestProduction));
        document.put("latest_testing_metadata_version", mvType.getMethod("version").invoke(latestTesting));
        document.put("metadata_versions", mvs);
        document.put("features", features);
        return document;
    }

    private static Map<String, Object> describeMetadataVersion(Class<?> mvType, Object mv)
            throws ReflectiveOperationException {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("name", mvType.getMethod("version").invoke(mv));
        entry.put("constant", ((Enum<?>) mv).name());
        entry.put("level", mvType.getMethod("featureLevel").invoke(mv));
        entry.put("release", mvType.getMethod("shortVersion").invoke(mv));
        entry.put("production", mvType.getMethod("isProduction").invoke(mv));
        entry.put("did_metadata_change", mvType.getMethod("didMetadataChange").invoke(mv));
        // Every public no-argument boolean is...Supported() answer, so a gate that moves between
        // releases shows up in the generated module's diff.
        Map<String, Object> gates = new TreeMap<>();
        for (Method method : mvType.getMethods()) {
            String name = method.getName();
            if (method.getParameterCount() == 0 && method.getReturnType() == boolean.class
                    && name.startsWith("is") && (name.endsWith("Supported") || name.endsWith("Required")
                    || name.endsWith("OnIsrShrink"))) {
                gates.put(name, method.invoke(mv));
            }
        }
        entry.put("gates", gates);
        Map<String, Object> records = new TreeMap<>();
        for (String name : RECORD_VERSIONS) {
            try {
                records.put(name, mvType.getMethod(name).invoke(mv));
            } catch (InvocationTargetException e) {
                // Kafka refuses the question below the version that brought the record
                // (registerControllerRecordVersion before 3.7-IV0): no version, recorded as null.
                records.put(name, null);
            }
        }
        entry.put("versions", records);
        return entry;
    }

    private static Map<String, Object> describeFeature(Class<?> featureType, Object feature, Object[] mvs)
            throws ReflectiveOperationException {
        Class<?> fvType = Class.forName(FEATURE_VERSION);
        Class<?> mvType = mvs[0].getClass();
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("name", featureType.getMethod("featureName").invoke(feature));
        entry.put("minimum_production", featureType.getMethod("minimumProduction").invoke(feature));
        entry.put("latest_production", featureType.getMethod("latestProduction").invoke(feature));
        entry.put("latest_testing", featureType.getMethod("latestTesting").invoke(feature));
        List<Object> levels = new ArrayList<>();
        for (Object fv : (Object[]) featureType.getMethod("featureVersions").invoke(feature)) {
            Map<String, Object> level = new LinkedHashMap<>();
            short value = (Short) fvType.getMethod("featureLevel").invoke(fv);
            level.put("level", value);
            level.put("production", featureType.getMethod("isProductionReady", short.class).invoke(feature, value));
            Object bootstrap = fvType.getMethod("bootstrapMetadataVersion").invoke(fv);
            level.put("bootstrap_metadata_version", mvType.getMethod("version").invoke(bootstrap));
            @SuppressWarnings("unchecked")
            Map<String, Short> dependencies = (Map<String, Short>) fvType.getMethod("dependencies").invoke(fv);
            level.put("dependencies", new TreeMap<>(dependencies));
            level.put("validation_errors", validationErrors(featureType, fvType, fv, dependencies));
            levels.add(level);
        }
        entry.put("levels", levels);
        Map<String, Object> defaults = new LinkedHashMap<>();
        Method defaultLevel = featureType.getMethod("defaultLevel", mvType);
        for (Object mv : mvs) {
            defaults.put((String) mvType.getMethod("version").invoke(mv), defaultLevel.invoke(feature, mv));
        }
        entry.put("default_levels", defaults);
        return entry;
    }

    /**
     * What Kafka's Feature.validateVersion says when this level's dependencies are not met: for each
     * dependency, once with the dependency absent and once one level below what is needed. The
     * other dependencies are given at their needed levels, so each message is about one of them.
     */
    private static List<Object> validationErrors(Class<?> featureType, Class<?> fvType, Object fv,
                                                 Map<String, Short> dependencies)
            throws ReflectiveOperationException {
        Method validate = featureType.getMethod("validateVersion", fvType, Map.class);
        List<Object> cases = new ArrayList<>();
        for (String dependency : new TreeMap<>(dependencies).keySet()) {
            short needed = dependencies.get(dependency);
            for (Short given : new Short[] {null, (short) (needed - 1)}) {
                Map<String, Short> proposed = new HashMap<>(dependencies);
                if (given == null) {
                    proposed.remove(dependency);
                } else {
                    proposed.put(dependency, given);
                }
                Map<String, Object> sample = new LinkedHashMap<>();
                sample.put("dependency", dependency);
                sample.put("given", given);
                try {
                    validate.invoke(null, fv, proposed);
                    sample.put("error", null);
                } catch (InvocationTargetException e) {
                    sample.put("exception", e.getCause().getClass().getSimpleName());
                    sample.put("error", e.getCause().getMessage());
                }
                cases.add(sample);
            }
        }
        return cases;
    }

    private static String jarOf(Class<?> type) {
        String location = type.getProtectionDomain().getCodeSource().getLocation().getPath();
        return location.substring(location.lastIndexOf('/') + 1);
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
}
