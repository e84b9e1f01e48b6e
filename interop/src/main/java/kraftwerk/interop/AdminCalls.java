package kraftwerk.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.AlterUserScramCredentialsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateAclsOptions;
import org.apache.kafka.clients.admin.CreatePartitionsOptions;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DeleteAclsOptions;
import org.apache.kafka.clients.admin.DeleteTopicsOptions;
import org.apache.kafka.clients.admin.DescribeAclsOptions;
import org.apache.kafka.clients.admin.DescribeClientQuotasOptions;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeFeaturesOptions;
import org.apache.kafka.clients.admin.DescribeMetadataQuorumOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.DescribeUserScramCredentialsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * The calls of PROTOCOL.md, each made through one {@link Admin} method and nothing else.
 *
 * <p>Rules it keeps: a call passes its {@code timeout_ms} to the Admin as the options' timeout,
 * so the client gives up by then; the driver also waits on the future only a little longer than
 * that, so a call can never hang the driver. No call is retried here. Results carry only the keys
 * PROTOCOL.md names, in a stable order (sorted ids and names, sorted maps).
 */
final class AdminCalls {

    /** How much longer than the client's own timeout the driver waits before answering for it. */
    private static final long DRIVER_GRACE_MS = 2_000;

    private final Admin admin;

    AdminCalls(Admin admin) {
        this.admin = admin;
    }

    /** A call the driver cannot make: named in PROTOCOL.md but not offered by this client. */
    private static final class Unsupported extends Exception {
        Unsupported(String reason) {
            super(reason);
        }
    }

    /** Arguments the driver cannot turn into a call (missing or malformed). */
    private static final class BadArgs extends Exception {
        BadArgs(String reason) {
            super(reason);
        }
    }

    Outcome call(String name, ObjectNode args) {
        int timeoutMs = args.path("timeout_ms").asInt(AdminDriver.DEFAULT_TIMEOUT_MS);
        if (timeoutMs <= 0) {
            timeoutMs = AdminDriver.DEFAULT_TIMEOUT_MS;
        }
        try {
            return Outcome.ok(dispatch(name, args, timeoutMs));
        } catch (Unsupported e) {
            return Outcome.unsupported(e.getMessage());
        } catch (BadArgs e) {
            return Outcome.error("bad args for " + name + ": " + e.getMessage(), false);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Outcome.failure(e);
        } catch (Exception e) {
            return Outcome.failure(e);
        }
    }

    private Map<String, ?> dispatch(String name, ObjectNode args, int timeoutMs) throws Exception {
        return switch (name) {
            case "describe_cluster" -> describeCluster(timeoutMs);
            case "describe_features" -> describeFeatures(timeoutMs);
            case "update_features" -> updateFeatures(args, timeoutMs);
            case "describe_quorum" -> describeQuorum(timeoutMs);
            case "create_topic" -> createTopic(args, timeoutMs);
            case "list_topics" -> listTopics(timeoutMs);
            case "describe_topic" -> describeTopic(args, timeoutMs);
            case "create_partitions" -> createPartitions(args, timeoutMs);
            case "delete_topic" -> deleteTopic(args, timeoutMs);
            case "describe_configs" -> describeConfigs(args, timeoutMs);
            case "alter_configs" -> throw new Unsupported(
                    "kafka-clients 4.x has no Admin#alterConfigs (the legacy AlterConfigs call, deprecated "
                            + "since 2.3, was removed in 4.0); only incrementalAlterConfigs remains");
            case "incremental_alter_configs" -> incrementalAlterConfigs(args, timeoutMs);
            case "alter_client_quotas" -> alterClientQuotas(args, timeoutMs);
            case "describe_client_quotas" -> describeClientQuotas(args, timeoutMs);
            case "create_acl" -> createAcl(args, timeoutMs);
            case "describe_acls" -> describeAcls(args, timeoutMs);
            case "delete_acls" -> deleteAcls(args, timeoutMs);
            case "alter_scram" -> alterScram(args, timeoutMs);
            case "describe_scram" -> describeScram(args, timeoutMs);
            default -> throw new Unsupported("unknown call " + name);
        };
    }

    private static <T> T await(KafkaFuture<T> future, int timeoutMs) throws Exception {
        return future.get(timeoutMs + DRIVER_GRACE_MS, TimeUnit.MILLISECONDS);
    }

    // --- cluster, features, quorum ---

    private Map<String, ?> describeCluster(int timeoutMs) throws Exception {
        DescribeClusterResult described = admin.describeCluster(new DescribeClusterOptions().timeoutMs(timeoutMs));
        String clusterId = await(described.clusterId(), timeoutMs);
        List<Integer> ids = new ArrayList<>();
        for (Node node : await(described.nodes(), timeoutMs)) {
            ids.add(node.id());
        }
        ids.sort(null);
        Node controller = await(described.controller(), timeoutMs);
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("cluster_id", clusterId);
        result.put("broker_ids", ids);
        result.put("controller_id", controller == null || controller.isEmpty() ? -1 : controller.id());
        return result;
    }

    private Map<String, ?> describeFeatures(int timeoutMs) throws Exception {
        FeatureMetadata features = await(
                admin.describeFeatures(new DescribeFeaturesOptions().timeoutMs(timeoutMs)).featureMetadata(),
                timeoutMs);
        Map<String, Integer> finalized = new TreeMap<>();
        features.finalizedFeatures().forEach((name, range) -> finalized.put(name, (int) range.maxVersionLevel()));
        Map<String, List<Integer>> supported = new TreeMap<>();
        features.supportedFeatures().forEach(
                (name, range) -> supported.put(name, List.of((int) range.minVersion(), (int) range.maxVersion())));
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("finalized", finalized);
        result.put("supported", supported);
        return result;
    }

    private Map<String, ?> updateFeatures(ObjectNode args, int timeoutMs) throws Exception {
        String feature = text(args, "feature");
        int level = integer(args, "level");
        if (level < Short.MIN_VALUE || level > Short.MAX_VALUE) {
            throw new BadArgs("level out of range: " + level);
        }
        FeatureUpdate.UpgradeType type = switch (args.path("type").asText("upgrade")) {
            case "upgrade" -> FeatureUpdate.UpgradeType.UPGRADE;
            case "safe_downgrade" -> FeatureUpdate.UpgradeType.SAFE_DOWNGRADE;
            case "unsafe_downgrade" -> FeatureUpdate.UpgradeType.UNSAFE_DOWNGRADE;
            default -> throw new BadArgs("type must be upgrade, safe_downgrade or unsafe_downgrade");
        };
        UpdateFeaturesOptions options = new UpdateFeaturesOptions()
                .validateOnly(args.path("validate_only").asBoolean(false))
                .timeoutMs(timeoutMs);
        await(admin.updateFeatures(Map.of(feature, new FeatureUpdate((short) level, type)), options).all(),
                timeoutMs);
        return Map.of();
    }

    private Map<String, ?> describeQuorum(int timeoutMs) throws Exception {
        QuorumInfo quorum = await(
                admin.describeMetadataQuorum(new DescribeMetadataQuorumOptions().timeoutMs(timeoutMs)).quorumInfo(),
                timeoutMs);
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("leader_id", quorum.leaderId());
        result.put("voters", replicaIds(quorum.voters()));
        result.put("observers", replicaIds(quorum.observers()));
        return result;
    }

    private static List<Integer> replicaIds(List<QuorumInfo.ReplicaState> replicas) {
        List<Integer> ids = new ArrayList<>();
        for (QuorumInfo.ReplicaState replica : replicas) {
            ids.add(replica.replicaId());
        }
        ids.sort(null);
        return ids;
    }

    // --- topics ---

    private Map<String, ?> createTopic(ObjectNode args, int timeoutMs) throws Exception {
        String name = text(args, "name");
        int partitions = args.path("partitions").asInt(1);
        int replicationFactor = args.path("replication_factor").asInt(1);
        NewTopic topic = new NewTopic(name, partitions, (short) replicationFactor).configs(stringMap(args, "configs"));
        await(admin.createTopics(List.of(topic), new CreateTopicsOptions().timeoutMs(timeoutMs)).all(), timeoutMs);
        return Map.of();
    }

    private Map<String, ?> listTopics(int timeoutMs) throws Exception {
        ListTopicsOptions options = new ListTopicsOptions().listInternal(false).timeoutMs(timeoutMs);
        List<String> names = new ArrayList<>(await(admin.listTopics(options).names(), timeoutMs));
        names.sort(null);
        return Map.of("topics", names);
    }

    private Map<String, ?> describeTopic(ObjectNode args, int timeoutMs) throws Exception {
        String name = text(args, "name");
        Map<String, TopicDescription> described = await(
                admin.describeTopics(TopicCollection.ofTopicNames(List.of(name)),
                        new DescribeTopicsOptions().timeoutMs(timeoutMs)).allTopicNames(),
                timeoutMs);
        return Map.of("partitions", described.get(name).partitions().size());
    }

    private Map<String, ?> createPartitions(ObjectNode args, int timeoutMs) throws Exception {
        String name = text(args, "name");
        int total = integer(args, "total");
        await(admin.createPartitions(Map.of(name, NewPartitions.increaseTo(total)),
                new CreatePartitionsOptions().timeoutMs(timeoutMs)).all(), timeoutMs);
        return Map.of();
    }

    private Map<String, ?> deleteTopic(ObjectNode args, int timeoutMs) throws Exception {
        String name = text(args, "name");
        await(admin.deleteTopics(TopicCollection.ofTopicNames(List.of(name)),
                new DeleteTopicsOptions().timeoutMs(timeoutMs)).all(), timeoutMs);
        return Map.of();
    }

    // --- configs ---

    private static ConfigResource configResource(ObjectNode args) throws BadArgs {
        String name = args.path("name").asText("");
        return switch (args.path("resource").asText("")) {
            case "topic" -> new ConfigResource(ConfigResource.Type.TOPIC, name);
            case "broker" -> new ConfigResource(ConfigResource.Type.BROKER, name);
            default -> throw new BadArgs("resource must be topic or broker");
        };
    }

    private Map<String, ?> describeConfigs(ObjectNode args, int timeoutMs) throws Exception {
        ConfigResource resource = configResource(args);
        Map<ConfigResource, Config> described = await(
                admin.describeConfigs(List.of(resource), new DescribeConfigsOptions().timeoutMs(timeoutMs)).all(),
                timeoutMs);
        Config config = described.get(resource);
        Map<String, String> configs = new TreeMap<>();
        List<String> keys = stringList(args, "keys");
        if (keys.isEmpty()) {
            // No keys asked: every entry, which is what a person debugging a run wants to see.
            for (ConfigEntry entry : config.entries()) {
                configs.put(entry.name(), entry.value());
            }
        } else {
            for (String key : keys) {
                ConfigEntry entry = config.get(key);
                configs.put(key, entry == null ? null : entry.value());
            }
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("configs", configs);
        return result;
    }

    private Map<String, ?> incrementalAlterConfigs(ObjectNode args, int timeoutMs) throws Exception {
        ConfigResource resource = configResource(args);
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> set : stringMap(args, "set").entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(set.getKey(), set.getValue()), AlterConfigOp.OpType.SET));
        }
        for (String key : stringList(args, "delete")) {
            ops.add(new AlterConfigOp(new ConfigEntry(key, null), AlterConfigOp.OpType.DELETE));
        }
        Map<ConfigResource, Collection<AlterConfigOp>> alterations = Map.of(resource, ops);
        await(admin.incrementalAlterConfigs(alterations, new AlterConfigsOptions().timeoutMs(timeoutMs)).all(),
                timeoutMs);
        return Map.of();
    }

    // --- client quotas ---

    private static Map<String, String> quotaEntity(ObjectNode args) throws BadArgs {
        JsonNode entity = args.path("entity");
        if (!entity.isObject() || entity.isEmpty()) {
            throw new BadArgs("entity must be an object such as {\"user\": name}");
        }
        Map<String, String> parts = new LinkedHashMap<>();
        Iterator<Map.Entry<String, JsonNode>> fields = entity.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            // JSON null names the default entity of that type, as Kafka's null name does.
            parts.put(field.getKey(), field.getValue().isNull() ? null : field.getValue().asText());
        }
        return parts;
    }

    private Map<String, ?> alterClientQuotas(ObjectNode args, int timeoutMs) throws Exception {
        ClientQuotaEntity entity = new ClientQuotaEntity(quotaEntity(args));
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        Iterator<Map.Entry<String, JsonNode>> set = args.path("set").fields();
        while (set.hasNext()) {
            Map.Entry<String, JsonNode> quota = set.next();
            if (!quota.getValue().isNumber()) {
                throw new BadArgs("quota " + quota.getKey() + " must be a number");
            }
            ops.add(new ClientQuotaAlteration.Op(quota.getKey(), quota.getValue().asDouble()));
        }
        for (String key : stringList(args, "remove")) {
            ops.add(new ClientQuotaAlteration.Op(key, null));
        }
        await(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, ops)),
                new AlterClientQuotasOptions().timeoutMs(timeoutMs)).all(), timeoutMs);
        return Map.of();
    }

    private Map<String, ?> describeClientQuotas(ObjectNode args, int timeoutMs) throws Exception {
        Map<String, String> parts = quotaEntity(args);
        List<ClientQuotaFilterComponent> components = new ArrayList<>();
        parts.forEach((type, name) -> components.add(name == null
                ? ClientQuotaFilterComponent.ofDefaultEntity(type)
                : ClientQuotaFilterComponent.ofEntity(type, name)));
        Map<ClientQuotaEntity, Map<String, Double>> described = await(
                admin.describeClientQuotas(ClientQuotaFilter.containsOnly(components),
                        new DescribeClientQuotasOptions().timeoutMs(timeoutMs)).entities(),
                timeoutMs);
        Map<String, Double> quotas = new TreeMap<>();
        Map<String, Double> ofEntity = described.get(new ClientQuotaEntity(parts));
        if (ofEntity != null) {
            quotas.putAll(ofEntity);
        }
        return Map.of("quotas", quotas);
    }

    // --- ACLs ---

    private static <E extends Enum<E>> E enumArg(ObjectNode args, String key, Class<E> type, String fallback)
            throws BadArgs {
        String value = args.path(key).asText(fallback);
        if (value == null || value.isEmpty()) {
            throw new BadArgs(key + " is required");
        }
        try {
            return Enum.valueOf(type, value.toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new BadArgs(key + " is not a " + type.getSimpleName() + ": " + value);
        }
    }

    private static AclBinding aclBinding(ObjectNode args) throws BadArgs {
        ResourcePattern pattern = new ResourcePattern(
                enumArg(args, "resource_type", ResourceType.class, null),
                text(args, "resource_name"),
                enumArg(args, "pattern", PatternType.class, "LITERAL"));
        AccessControlEntry entry = new AccessControlEntry(
                text(args, "principal"),
                args.path("host").asText("*"),
                enumArg(args, "operation", AclOperation.class, null),
                enumArg(args, "permission", AclPermissionType.class, null));
        return new AclBinding(pattern, entry);
    }

    private Map<String, ?> createAcl(ObjectNode args, int timeoutMs) throws Exception {
        await(admin.createAcls(List.of(aclBinding(args)), new CreateAclsOptions().timeoutMs(timeoutMs)).all(),
                timeoutMs);
        return Map.of();
    }

    private Map<String, ?> describeAcls(ObjectNode args, int timeoutMs) throws Exception {
        JsonNode resourceName = args.path("resource_name");
        ResourcePatternFilter patternFilter = new ResourcePatternFilter(
                enumArg(args, "resource_type", ResourceType.class, "ANY"),
                resourceName.isTextual() ? resourceName.asText() : null,
                enumArg(args, "pattern", PatternType.class, "LITERAL"));
        AclBindingFilter filter = new AclBindingFilter(patternFilter, AccessControlEntryFilter.ANY);
        Collection<AclBinding> bindings = await(
                admin.describeAcls(filter, new DescribeAclsOptions().timeoutMs(timeoutMs)).values(), timeoutMs);
        List<Map<String, String>> acls = new ArrayList<>();
        for (AclBinding binding : bindings) {
            Map<String, String> acl = new LinkedHashMap<>();
            acl.put("principal", binding.entry().principal());
            acl.put("host", binding.entry().host());
            acl.put("operation", binding.entry().operation().name());
            acl.put("permission", binding.entry().permissionType().name());
            acls.add(acl);
        }
        acls.sort((a, b) -> String.join("\u0000", a.values()).compareTo(String.join("\u0000", b.values())));
        return Map.of("acls", acls);
    }

    private Map<String, ?> deleteAcls(ObjectNode args, int timeoutMs) throws Exception {
        Collection<AclBinding> deleted = await(
                admin.deleteAcls(List.of(aclBinding(args).toFilter()), new DeleteAclsOptions().timeoutMs(timeoutMs))
                        .all(),
                timeoutMs);
        return Map.of("deleted", deleted.size());
    }

    // --- SCRAM credentials ---

    private static ScramMechanism mechanism(ObjectNode args) throws BadArgs {
        ScramMechanism mechanism = ScramMechanism.fromMechanismName(text(args, "mechanism"));
        if (mechanism == ScramMechanism.UNKNOWN) {
            throw new BadArgs("mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512");
        }
        return mechanism;
    }

    private Map<String, ?> alterScram(ObjectNode args, int timeoutMs) throws Exception {
        String user = text(args, "user");
        UserScramCredentialAlteration alteration;
        if (args.path("delete").asBoolean(false)) {
            alteration = new UserScramCredentialDeletion(user, mechanism(args));
        } else {
            ScramCredentialInfo info = new ScramCredentialInfo(mechanism(args), integer(args, "iterations"));
            alteration = new UserScramCredentialUpsertion(user, info, text(args, "password"));
        }
        await(admin.alterUserScramCredentials(List.of(alteration),
                new AlterUserScramCredentialsOptions().timeoutMs(timeoutMs)).all(), timeoutMs);
        return Map.of();
    }

    private Map<String, ?> describeScram(ObjectNode args, int timeoutMs) throws Exception {
        List<String> users = stringList(args, "users");
        // An empty list asks for every user, as the Admin call does with null.
        Map<String, UserScramCredentialsDescription> described = await(
                admin.describeUserScramCredentials(users.isEmpty() ? null : users,
                        new DescribeUserScramCredentialsOptions().timeoutMs(timeoutMs)).all(),
                timeoutMs);
        Map<String, List<Map<String, Object>>> result = new TreeMap<>();
        described.forEach((user, description) -> {
            List<Map<String, Object>> infos = new ArrayList<>();
            for (ScramCredentialInfo info : description.credentialInfos()) {
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("mechanism", info.mechanism().mechanismName());
                one.put("iterations", info.iterations());
                infos.add(one);
            }
            infos.sort((a, b) -> ((String) a.get("mechanism")).compareTo((String) b.get("mechanism")));
            result.put(user, infos);
        });
        return Map.of("users", result);
    }

    // --- argument helpers ---

    private static String text(ObjectNode args, String key) throws BadArgs {
        JsonNode value = args.get(key);
        if (value == null || value.isNull() || !value.isValueNode()) {
            throw new BadArgs(key + " is required");
        }
        return value.asText();
    }

    private static int integer(ObjectNode args, String key) throws BadArgs {
        JsonNode value = args.get(key);
        if (value == null || !value.canConvertToInt()) {
            throw new BadArgs(key + " must be an integer");
        }
        return value.asInt();
    }

    private static Map<String, String> stringMap(ObjectNode args, String key) {
        Map<String, String> map = new LinkedHashMap<>();
        Iterator<Map.Entry<String, JsonNode>> fields = args.path(key).fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            map.put(field.getKey(), field.getValue().isNull() ? null : field.getValue().asText());
        }
        return map;
    }

    private static List<String> stringList(ObjectNode args, String key) {
        List<String> list = new ArrayList<>();
        for (JsonNode item : args.path(key)) {
            list.add(item.asText());
        }
        return list;
    }
}
