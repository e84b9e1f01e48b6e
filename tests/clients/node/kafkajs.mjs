// The kafkajs (2.2.x) side of the Node.js matrix driver.
//
// Maps the protocol's calls onto kafkajs's admin client. kafkajs 2.2.4's admin has no
// feature, quorum, client-quota, SCRAM or IncrementalAlterConfigs API: those calls answer
// `unsupported`. Rules it keeps:
// - retries are off (retry.retries = 0) for the admin and its cluster, so one call is one try;
// - errors are named by the Kafka error kafkajs carries (`type`), found through its
//   wrappers (KafkaJSNumberOfRetriesExceeded, KafkaJSNonRetriableError, aggregate errors);
//   `retriable` is that innermost error's own flag, not the wrapper's.
// - logs go to stderr as JSON lines.

import { createRequire } from 'node:module'
import kafkajs from 'kafkajs'
import { Unsupported, enumValue, enumName, entriesOf, pickConfigs, sortAcls } from './common.mjs'

const require = createRequire(import.meta.url)
const VERSION = require('kafkajs/package.json').version
const CLIENT = 'kafkajs'

const {
  Kafka, logLevel, ConfigResourceTypes, AclResourceTypes, AclOperationTypes,
  AclPermissionTypes, ResourcePatternTypes
} = kafkajs

// kafkajs fixes its socket request timeout per client, not per call; the driver's deadline
// bounds each call by its own timeout_ms and this covers the protocol's default.
const REQUEST_TIMEOUT_MS = 15000
const CONNECTION_TIMEOUT_MS = 3000

// Kafka marks these topics internal; kafkajs's listTopics returns names only, without the flag.
const INTERNAL_TOPICS = new Set(['__consumer_offsets', '__transaction_state', '__share_group_state'])

const UNSUPPORTED = {
  describe_features: 'kafkajs 2.2.4 admin has no describeFeatures (ApiVersions features are not exposed)',
  update_features: 'kafkajs 2.2.4 admin has no updateFeatures',
  describe_quorum: 'kafkajs 2.2.4 admin has no describeQuorum',
  incremental_alter_configs: 'kafkajs 2.2.4 admin has no incrementalAlterConfigs (only legacy alterConfigs)',
  alter_client_quotas: 'kafkajs 2.2.4 admin has no alterClientQuotas',
  describe_client_quotas: 'kafkajs 2.2.4 admin has no describeClientQuotas',
  alter_scram: 'kafkajs 2.2.4 admin has no alterUserScramCredentials',
  describe_scram: 'kafkajs 2.2.4 admin has no describeUserScramCredentials'
}

function stderrLogCreator () {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(JSON.stringify({ client: CLIENT, level: label, namespace, message, ...extra }) + '\n')
  }
}

function configResourceType (resource) {
  return enumValue(ConfigResourceTypes, resource, 'config resource type', CLIENT)
}

function aclFields (args) {
  return {
    resourceType: enumValue(AclResourceTypes, args.resource_type, 'ACL resource type', CLIENT),
    resourceName: args.resource_name,
    resourcePatternType: enumValue(ResourcePatternTypes, args.pattern ?? 'LITERAL', 'resource pattern type', CLIENT)
  }
}

function aclEntry (args) {
  return {
    ...aclFields(args),
    principal: args.principal,
    host: args.host ?? '*',
    operation: enumValue(AclOperationTypes, args.operation, 'ACL operation', CLIENT),
    permissionType: enumValue(AclPermissionTypes, args.permission, 'ACL permission type', CLIENT)
  }
}

/** The innermost error of kafkajs's wrapper chain that names a Kafka error, else the innermost. */
function rootCause (error) {
  let current = error
  for (let depth = 0; depth < 10 && current; depth++) {
    if (current.type) return current
    if (Array.isArray(current.errors) && current.errors.length > 0) {
      current = current.errors[0]
      continue
    }
    if (current.cause && current.cause !== current) {
      current = current.cause
      continue
    }
    break
  }
  return current ?? error
}

export function describeError (error) {
  const root = rootCause(error)
  if (root?.type) {
    return { error: root.type, retriable: root.retriable === true }
  }
  const text = `${root?.name ?? 'Error'}: ${root?.message ?? String(root)}`
  return { error: text, retriable: root?.retriable === true }
}

export async function createDriver ({ bootstrap, path }) {
  // kafkajs has no separate setting for controllers: on the controller path it bootstraps
  // from the controllers' addresses as if they were brokers.
  const kafka = new Kafka({
    clientId: `kraftwerk-matrix-kafkajs-${path}`,
    brokers: bootstrap,
    requestTimeout: REQUEST_TIMEOUT_MS,
    connectionTimeout: CONNECTION_TIMEOUT_MS,
    retry: { retries: 0 },
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator
  })
  const admin = kafka.admin({ retry: { retries: 0 } })

  // kafkajs needs connect() once before its admin calls; after that it reconnects to the
  // brokers it knows by itself. Connecting on the first call (not at start) keeps `ready`
  // independent of the cluster and bounds the connect by that call's deadline.
  let connected = false
  const ensureConnected = async () => {
    if (!connected) {
      await admin.connect()
      connected = true
    }
  }

  const handlers = {
    async describe_cluster () {
      const { brokers, controller, clusterId } = await admin.describeCluster()
      return {
        cluster_id: clusterId,
        broker_ids: brokers.map(b => b.nodeId).sort((a, b) => a - b),
        controller_id: controller ?? -1
      }
    },

    async create_topic (args, timeoutMs) {
      const created = await admin.createTopics({
        topics: [{
          topic: args.name,
          numPartitions: args.partitions ?? -1,
          replicationFactor: args.replication_factor ?? -1,
          configEntries: entriesOf(args.configs).map(([name, value]) => ({ name, value: String(value) }))
        }],
        timeout: timeoutMs,
        // Like Java's AdminClient: answer when the controller has created the topic,
        // without polling metadata for partition leaders afterwards.
        waitForLeaders: false
      })
      // kafkajs swallows TOPIC_ALREADY_EXISTS and answers false instead of throwing.
      if (created === false) {
        const error = new Error('kafkajs createTopics returned false (topic already exists)')
        error.type = 'TOPIC_ALREADY_EXISTS'
        error.retriable = false
        throw error
      }
      return {}
    },

    async list_topics () {
      const topics = await admin.listTopics()
      return { topics: topics.filter(t => !INTERNAL_TOPICS.has(t)).sort() }
    },

    async describe_topic (args) {
      const { topics } = await admin.fetchTopicMetadata({ topics: [args.name] })
      const topic = topics.find(t => t.name === args.name)
      if (!topic) {
        const error = new Error(`topic ${args.name} missing from the metadata answer`)
        error.type = 'UNKNOWN_TOPIC_OR_PARTITION'
        error.retriable = true
        throw error
      }
      return { partitions: topic.partitions.length }
    },

    async create_partitions (args, timeoutMs) {
      await admin.createPartitions({ topicPartitions: [{ topic: args.name, count: args.total }], timeout: timeoutMs })
      return {}
    },

    async delete_topic (args, timeoutMs) {
      await admin.deleteTopics({ topics: [args.name], timeout: timeoutMs })
      return {}
    },

    async describe_configs (args) {
      const keys = args.keys ?? []
      const { resources } = await admin.describeConfigs({
        resources: [{ type: configResourceType(args.resource), name: String(args.name), configNames: keys }],
        includeSynonyms: false
      })
      const described = {}
      for (const resource of resources) {
        for (const entry of resource.configEntries ?? []) described[entry.configName] = entry.configValue ?? null
      }
      return { configs: pickConfigs(keys, described) }
    },

    async alter_configs (args) {
      await admin.alterConfigs({
        resources: [{
          type: configResourceType(args.resource),
          name: String(args.name),
          configEntries: entriesOf(args.configs).map(([name, value]) => ({ name, value: String(value) }))
        }],
        validateOnly: false
      })
      return {}
    },

    async create_acl (args) {
      await admin.createAcls({ acl: [aclEntry(args)] })
      return {}
    },

    async describe_acls (args) {
      const { resources } = await admin.describeAcls({
        ...aclFields(args),
        principal: undefined,
        host: undefined,
        operation: AclOperationTypes.ANY,
        permissionType: AclPermissionTypes.ANY
      })
      const acls = []
      for (const resource of resources ?? []) {
        for (const acl of resource.acls ?? []) {
          acls.push({
            principal: acl.principal,
            host: acl.host,
            operation: enumName(AclOperationTypes, acl.operation),
            permission: enumName(AclPermissionTypes, acl.permissionType)
          })
        }
      }
      return { acls: sortAcls(acls) }
    },

    async delete_acls (args) {
      const { filterResponses } = await admin.deleteAcls({ filters: [aclEntry(args)] })
      let deleted = 0
      for (const response of filterResponses ?? []) deleted += (response.matchingAcls ?? []).length
      return { deleted }
    }
  }

  const calls = {}
  for (const [name, handler] of Object.entries(handlers)) {
    calls[name] = async (args, timeoutMs) => {
      await ensureConnected()
      return handler(args, timeoutMs)
    }
  }

  return {
    name: CLIENT,
    version: VERSION,
    calls,
    unsupported: UNSUPPORTED,
    Unsupported,
    describeError,
    close: () => (connected ? admin.disconnect() : undefined)
  }
}
