// The client-matrix driver for Node.js admin clients (kafkajs, @platformatic/kafka).
//
// Speaks the line protocol of tests/clients/PROTOCOL.md: one admin client object for the
// whole process, one JSON call per stdin line, exactly one JSON answer per call on stdout.
// Rules it keeps:
// - stdout carries protocol lines only: console output of any library goes to stderr.
// - Calls run one at a time, in order; each is bounded by its own args.timeout_ms, so the
//   driver answers even when the client itself never gives up.
// - The driver never retries; the per-client modules turn the clients' retries off.
// - Per-client knowledge (which calls exist, how errors are named) lives in kafkajs.mjs and
//   platformatic.mjs; this file only owns the protocol.
//
// Usage: node driver.mjs kafkajs|platformatic --bootstrap HOST:PORT[,HOST:PORT...] --path broker|controller

import { createInterface } from 'node:readline'

// Libraries sometimes print with console.log/info; those lines must never reach stdout.
console.log = console.error
console.info = console.error
console.debug = console.error
console.warn = console.error

const DEFAULT_TIMEOUT_MS = 15000
// How long closing the client may take before the process exits anyway.
const CLOSE_TIMEOUT_MS = 5000

const CLIENTS = {
  kafkajs: () => import('./kafkajs.mjs'),
  platformatic: () => import('./platformatic.mjs')
}

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function parseArgs (argv) {
  const [client, ...rest] = argv
  const opts = { client, bootstrap: null, path: 'broker' }
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i]
    const value = rest[i + 1]
    if (flag === '--bootstrap' && value !== undefined) {
      opts.bootstrap = value.split(',').map(s => s.trim()).filter(Boolean)
      i++
    } else if (flag === '--path' && value !== undefined) {
      opts.path = value
      i++
    } else {
      throw new Error(`unknown argument ${flag}`)
    }
  }
  if (!(client in CLIENTS)) {
    throw new Error(`first argument must be one of ${Object.keys(CLIENTS).join(', ')}, got ${client}`)
  }
  if (!opts.bootstrap || opts.bootstrap.length === 0) throw new Error('--bootstrap HOST:PORT[,..] is required')
  if (opts.path !== 'broker' && opts.path !== 'controller') throw new Error('--path must be broker or controller')
  return opts
}

/** Resolves with fn's outcome, or with a timeout marker after timeoutMs, whichever is first. */
function withDeadline (promiseFactory, timeoutMs) {
  let timer
  const deadline = new Promise(resolve => {
    timer = setTimeout(() => resolve({ timedOut: true }), timeoutMs)
  })
  const work = Promise.resolve()
    .then(promiseFactory)
    .then(value => ({ value }), error => ({ error }))
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer))
}

async function answer (driver, message) {
  const { id, call } = message
  const args = message.args ?? {}
  const handler = driver.calls[call]
  if (handler === undefined) {
    const reason = driver.unsupported[call]
    emit({ id, status: 'unsupported', reason: reason ?? `the driver knows no call named ${call}` })
    return
  }
  const timeoutMs = Number.isFinite(args.timeout_ms) && args.timeout_ms > 0 ? args.timeout_ms : DEFAULT_TIMEOUT_MS
  const outcome = await withDeadline(() => handler(args, timeoutMs), timeoutMs)
  if (outcome.timedOut) {
    // The client did not answer in time; a timeout is worth trying again.
    emit({ id, status: 'error', error: `timed out after ${timeoutMs} ms (driver deadline)`, retriable: true })
  } else if (outcome.error !== undefined) {
    if (outcome.error instanceof driver.Unsupported) {
      emit({ id, status: 'unsupported', reason: outcome.error.message })
    } else {
      const { error, retriable } = driver.describeError(outcome.error)
      emit({ id, status: 'error', error, retriable })
    }
  } else {
    emit({ id, status: 'ok', result: outcome.value ?? {} })
  }
}

async function closeAndExit (driver, id) {
  if (driver) {
    const outcome = await withDeadline(() => driver.close(), CLOSE_TIMEOUT_MS)
    if (outcome.error) console.error('driver: close failed:', outcome.error)
    if (outcome.timedOut) console.error(`driver: close took over ${CLOSE_TIMEOUT_MS} ms; exiting anyway`)
  }
  if (id !== undefined) emit({ id, status: 'ok', result: {} })
  // Exit explicitly: a client may hold sockets or timers open after close.
  process.stdout.write('', () => process.exit(0))
}

async function main () {
  let opts
  let driver
  try {
    opts = parseArgs(process.argv.slice(2))
    const mod = await CLIENTS[opts.client]()
    driver = await mod.createDriver({ bootstrap: opts.bootstrap, path: opts.path })
  } catch (error) {
    emit({ ready: false, error: String(error?.message ?? error) })
    process.stdout.write('', () => process.exit(1))
    return
  }
  emit({ ready: true, client: driver.name, version: driver.version })

  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity, terminal: false })
  for await (const line of lines) {
    if (line.trim() === '') continue
    let message
    try {
      message = JSON.parse(line)
    } catch (error) {
      console.error(`driver: ignoring a line that is not JSON: ${line.slice(0, 200)}`)
      continue
    }
    if (message.call === 'close') {
      await closeAndExit(driver, message.id)
      return
    }
    await answer(driver, message)
  }
  await closeAndExit(driver, undefined)
}

main().catch(error => {
  console.error('driver: fatal:', error)
  process.exit(2)
})
