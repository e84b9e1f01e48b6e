# Part of scripts/setup --test (sourced: bash, set -euo pipefail, cwd = repo root).
# Builds the Go client-matrix driver (franz-go's kadm and IBM's sarama, pinned in
# tests/clients/go/go.mod + go.sum) into tests/clients/go/bin/matrix-driver.
# Idempotent: the binary is its own stamp, rebuilt only when a .go file, go.mod
# or go.sum is newer. Never fails the whole setup: without Go, or when the build
# fails, it says so and the Go client tests skip (and fail with CI=true).

go_clients_setup() {
    local dir=tests/clients/go
    local bin="$dir/bin/matrix-driver"
    local go_bin
    go_bin="$(command -v go 2>/dev/null || true)"
    if [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ]; then
        go_bin=/usr/local/go/bin/go
    fi
    if [ -z "$go_bin" ]; then
        echo "setup: go missing; the Go client tests (kadm, sarama) skip (and fail with CI=true)"
        return 0
    fi
    if [ -x "$bin" ] && [ -z "$(find "$dir" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$bin" -print -quit)" ]; then
        echo "setup: Go client driver up to date ($bin)"
        return 0
    fi
    echo "setup: building the Go client driver (kadm, sarama) with $("$go_bin" version | cut -d' ' -f3)"
    # GOTOOLCHAIN=local: an older Go must fail here, not fetch a toolchain.
    # -buildvcs=false: a fresh clone owned by another user must not fail on
    # git's ownership check; the driver reports module versions, not VCS ones.
    if ! (cd "$dir" && GOTOOLCHAIN=local "$go_bin" build -buildvcs=false -o bin/matrix-driver .); then
        echo "setup: could not build the Go client driver; the Go client tests skip (and fail with CI=true)"
        return 0
    fi
}

go_clients_setup
unset -f go_clients_setup
