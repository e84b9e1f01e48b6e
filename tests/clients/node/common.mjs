// Helpers shared by the Node.js client modules of the matrix driver.
// Owns: the "this client cannot make that call" error and small argument readers.

/** Thrown by a call handler when the client's API cannot express the request. */
export class Unsupported extends Error {}

/** The value of `name` in a table of Kafka enum names (READ, ALLOW, TOPIC, ...). */
export function enumValue (table, name, what, client) {
  const key = String(name ?? '').toUpperCase()
  if (!Object.prototype.hasOwnProperty.call(table, key)) {
    throw new Unsupported(`${client} has no ${what} named ${name}`)
  }
  return table[key]
}

/** The name of `value` in a table of Kafka enum names, or String(value) if unknown. */
export function enumName (table, value) {
  for (const [key, v] of Object.entries(table)) {
    if (v === value) return key
  }
  return String(value)
}

/** {feature: ...}-style objects from args, defaulting to empty. */
export function entriesOf (obj) {
  return Object.entries(obj ?? {})
}

/** The configs result of describe_configs: every asked key, null when not described. */
export function pickConfigs (keys, described) {
  const configs = {}
  for (const key of keys ?? []) {
    configs[key] = Object.prototype.hasOwnProperty.call(described, key) ? described[key] : null
  }
  return configs
}

/** Sorts ACL rows so answers do not depend on server order. */
export function sortAcls (acls) {
  return acls.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))
}

/** The single-entity quota selector of the protocol: {user: name} or {"client-id": id}. */
export function quotaEntity (entity) {
  const pairs = entriesOf(entity)
  if (pairs.length !== 1) throw new Error(`entity must name exactly one of user, client-id: ${JSON.stringify(entity)}`)
  const [type, name] = pairs[0]
  return { type, name }
}
