# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Installs the client matrix's Node.js admin clients (kafkajs, @platformatic/kafka) at the
# exact versions of tests/clients/node/package-lock.json, with `npm ci`. Idempotent: a stamp
# inside node_modules records the install and is compared with the lock file. A missing
# toolchain or a failed install never fails the whole setup: the Node driver tests then
# skip locally (and fail with CI=true).

node_clients_dir="tests/clients/node"
node_clients_stamp="$node_clients_dir/node_modules/.kraftwerk-installed"

node_clients_install() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "setup: node missing; the Node client tests (kafkajs, @platformatic/kafka) skip (and fail with CI=true)"
        return 0
    fi
    local node_major
    node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
    # @platformatic/kafka 1.35 needs Node.js >= 20.19.4 (2.x needs >= 22.22).
    if [ "$node_major" -lt 20 ]; then
        echo "setup: node $(node --version) is older than 20; the Node client tests skip (and fail with CI=true)"
        return 0
    fi
    if [ -d "$node_clients_dir/node_modules" ] && [ -f "$node_clients_stamp" ] \
        && [ ! "$node_clients_dir/package-lock.json" -nt "$node_clients_stamp" ] \
        && [ ! "$node_clients_dir/package.json" -nt "$node_clients_stamp" ]; then
        return 0
    fi
    echo "setup: installing the Node admin clients (npm ci in $node_clients_dir, node $(node --version))"
    local log
    log="$(mktemp)"
    if (cd "$node_clients_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
        touch "$node_clients_stamp"
    else
        head -n 8 "$log" | sed 's/^/setup:   /'
        echo "setup: npm ci failed in $node_clients_dir; the Node client tests skip (and fail with CI=true)"
    fi
    rm -f "$log"
    return 0
}

node_clients_install
