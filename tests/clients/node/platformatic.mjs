// The @platformatic/kafka side of the Node.js matrix driver.
//
// Maps the protocol's calls onto the package's Admin client (and, for describe_cluster, the
// cluster metadata every client of the package offers). Its Admin has no feature, quorum or
// SCRAM API: those calls answer `unsupported`. The package does export its protocol
// encoders (updateFeaturesV0, describeQuorumV0, ...), but PROTOCOL.md rules out making a
// call from raw protocol frames, so the driver does not use them. Rules it keeps:
// - retries are off (retries = 0), so one call is one try;
// - an error is named by the first Kafka protocol error in the package's error tree
//   (ProtocolError.apiId, e.g. TOPIC_ALREADY_EXISTS); `retriable` follows the package's own
//   rule: retriable unless some error in the tree has canRetry === false.
// - the package logs through `debug` (stderr), so nothing reaches stdout.

import {
  Admin, clientSoftwareVersion, GenericError, kOptions, ConfigResourceTypes, ResourceTypes, ResourcePatternTypes,
  AclOperations, AclPermissionTypes, IncrementalAlterConfigOperationTypes, ClientQuotaMatchTypes
} from '@platformatic/kafka'
import { Unsupported, enumValue, enumName, entriesOf, pickConfigs, sortAcls, quotaEntity } from './common.mjs'

const CLIENT = 'platformatic'
// The package's exports map hides package.json; it exports its own version instead.
const VERSION = clientSoftwareVersion

// Socket-level bounds fixed per connection by the package; each call is bounded by the
// driver's deadline (its timeout_ms) and the server-side timeout is set per call.
const REQUEST_TIMEOUT_MS = 15000
const CONNECT_TIMEOUT_MS = 3000

const UNSUPPORTED = {
  describe_features: '@platformatic/kafka Admin has no describeFeatures',
  update_features: '@platformatic/kafka Admin has no updateFeatures (only the raw updateFeaturesV0/V1 encoders are exported)',
  describe_quorum: '@platformatic/kafka Admin has no describeQuorum (only the raw describeQuorumV0-V2 encoders are exported)',
  alter_scram: '@platformatic/kafka Admin has no alterUserScramCredentials (only the raw alterUserScramCredentialsV0 encoder is exported)',
  describe_scram: '@platformatic/kafka Admin has no describeUserScramCredentials (only the raw describeUserScramCredentialsV0 encoder is exported)'
}

function configResourceType (resource) {
  return enumValue(ConfigResourceTypes, resource, 'config resource type', CLIENT)
}

function aclTarget (args) {
  return {
    resourceType: enumValue(ResourceTypes, args.resource_type, 'ACL resource type', CLIENT),
    resourceName: args.resource_name,
    resourcePatternType: enumValue(ResourcePatternTypes, args.pattern ?? 'LITERAL', 'resource pattern type', CLIENT)
  }
}

function acl (args) {
  return {
    ...aclTarget(args),
    principal: args.principal,
    host: args.host ?? '*',
    operation: enumValue(AclOperations, args.operation, 'ACL operation', CLIENT),
    permissionType: enumValue(AclPermissionTypes, args.permission, 'ACL permission type', CLIENT)
  }
}

/** The deepest first error of the package's error tree (MultipleErrors nest). */
function leafError (error) {
  let current = error
  for (let depth = 0; depth < 10; depth++) {
    if (Array.isArray(current?.errors) && current.errors.length > 0 && current.errors[0]) {
      current = current.errors[0]
    } else if (current?.cause && current.cause !== current) {
      current = current.cause
    } else {
      break
    }
  }
  return current ?? error
}

/** The package's GenericError.findBy over its error tree (findErrorBy is not exported in 1.x). */
function findErrorBy (error, property, value) {
  if (!error || !GenericError.isGenericError(error)) return null
  return error.findBy(property, value)
}

export function describeError (error) {
  // The package's own retry rule: retry only if no error in the chain says canRetry: false.
  // Errors that are not the package's (argument errors in this driver) are not retriable.
  const retriable = GenericError.isGenericError(error) && !findErrorBy(error, 'canRetry', false)
  const protocolError = findErrorBy(error, 'code', 'PLT_KFK_PROTOCOL')
  if (protocolError?.apiId) {
    return { error: protocolError.apiId, retriable: protocolError.canRetry === true }
  }
  const leaf = leafError(error)
  const code = leaf?.code ? `${leaf.code}: ` : ''
  return { error: `${code}${leaf?.message ?? String(leaf)}`, retriable }
}

export async function createDriver ({ bootstrap, path }) {
  // The package has no separate setting for controllers: on the controller path it
  // bootstraps from the controllers' addresses as if they were brokers.
  const admin = new Admin({
    clientId: `kraftwerk-matrix-platformatic-${path}`,
    bootstrapBrokers: bootstrap,
    retries: 0,
    timeout: REQUEST_TIMEOUT_MS,
    requestTimeout: REQUEST_TIMEOUT_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    autocreateTopics: false
  })

  // The package's `timeout` option is what it sends as the server-side timeout
  // (CreateTopics, DeleteTopics, CreatePartitions); it is read on each call.
  const withServerTimeout = timeoutMs => { admin[kOptions].timeout = timeoutMs }

  const calls = {
    async describe_cluster () {
      const metadata = await admin.metadata({ topics: [], forceUpdate: true })
      return {
        cluster_id: metadata.id,
        broker_ids: Array.from(metadata.brokers.keys()).sort((a, b) => a - b),
        controller_id: metadata.controllerId ?? -1
      }
    },

    async create_topic (args, timeoutMs) {
      withServerTimeout(timeoutMs)
      await admin.createTopics({
        topics: [args.name],
        partitions: args.partitions ?? -1,
        replicas: args.replication_factor ?? -1,
        configs: entriesOf(args.configs).map(([name, value]) => ({ name, value: String(value) }))
      })
      return {}
    },

    async list_topics () {
      const topics = await admin.listTopics({ includeInternals: false })
      return { topics: [...topics].sort() }
    },

    async describe_topic (args) {
      const metadata = await admin.metadata({ topics: [args.name], forceUpdate: true, autocreateTopics: false })
      const topic = metadata.topics.get(args.name)
      if (!topic) throw new Error(`topic ${args.name} missing from the metadata answer`)
      return { partitions: topic.partitionsCount ?? topic.partitions.length }
    },

    async create_partitions (args, timeoutMs) {
      withServerTimeout(timeoutMs)
      await admin.createPartitions({ topics: [{ name: args.name, count: args.total, assignments: null }] })
      return {}
    },

    async delete_topic (args, timeoutMs) {
      withServerTimeout(timeoutMs)
      await admin.deleteTopics({ topics: [args.name] })
      return {}
    },

    async describe_configs (args) {
      const keys = args.keys ?? []
      const results = await admin.describeConfigs({
        resources: [{
          resourceType: configResourceType(args.resource),
          resourceName: String(args.name),
          configurationKeys: keys
        }]
      })
      const described = {}
      for (const result of results ?? []) {
        for (const config of result.configs ?? []) described[config.name] = config.value ?? null
      }
      return { configs: pickConfigs(keys, described) }
    },

    async alter_configs (args) {
      await admin.alterConfigs({
        resources: [{
          resourceType: configResourceType(args.resource),
          resourceName: String(args.name),
          configs: entriesOf(args.configs).map(([name, value]) => ({ name, value: String(value) }))
        }]
      })
      return {}
    },

    async incremental_alter_configs (args) {
      const configs = [
        ...entriesOf(args.set).map(([name, value]) => ({
          name, configOperation: IncrementalAlterConfigOperationTypes.SET, value: String(value)
        })),
        ...(args.delete ?? []).map(name => ({ name, configOperation: IncrementalAlterConfigOperationTypes.DELETE }))
      ]
      await admin.incrementalAlterConfigs({
        resources: [{ resourceType: configResourceType(args.resource), resourceName: String(args.name), configs }]
      })
      return {}
    },

    async alter_client_quotas (args) {
      const { type, name } = quotaEntity(args.entity)
      const ops = [
        ...entriesOf(args.set).map(([key, value]) => ({ key, value: Number(value), remove: false })),
        ...(args.remove ?? []).map(key => ({ key, remove: true }))
      ]
      await admin.alterClientQuotas({ entries: [{ entities: [{ entityType: type, entityName: name }], ops }] })
      return {}
    },

    async describe_client_quotas (args) {
      const { type, name } = quotaEntity(args.entity)
      const entries = await admin.describeClientQuotas({
        components: [{ entityType: type, matchType: ClientQuotaMatchTypes.EXACT, match: name }],
        strict: true
      })
      const quotas = {}
      for (const entry of entries ?? []) {
        const exact = entry.entity.length === 1 && entry.entity[0].entityType === type && entry.entity[0].entityName === name
        if (!exact) continue
        for (const { key, value } of entry.values) quotas[key] = value
      }
      return { quotas }
    },

    async create_acl (args) {
      await admin.createAcls({ creations: [acl(args)] })
      return {}
    },

    async describe_acls (args) {
      const resources = await admin.describeAcls({
        filter: {
          ...aclTarget(args),
          principal: null,
          host: null,
          operation: AclOperations.ANY,
          permissionType: AclPermissionTypes.ANY
        }
      })
      const acls = []
      for (const resource of resources ?? []) {
        for (const entry of resource.acls ?? []) {
          acls.push({
            principal: entry.principal,
            host: entry.host,
            operation: enumName(AclOperations, entry.operation),
            permission: enumName(AclPermissionTypes, entry.permissionType)
          })
        }
      }
      return { acls: sortAcls(acls) }
    },

    async delete_acls (args) {
      const deleted = await admin.deleteAcls({ filters: [acl(args)] })
      return { deleted: (deleted ?? []).length }
    }
  }

  return {
    name: CLIENT,
    version: VERSION,
    calls,
    unsupported: UNSUPPORTED,
    Unsupported,
    describeError,
    close: () => admin.close()
  }
}
