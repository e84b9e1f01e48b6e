// Command matrix-driver drives one Go admin client (franz-go's kadm or IBM's
// sarama) through the client matrix's line protocol (tests/clients/PROTOCOL.md).
//
// It owns one admin client object for its whole life, reads one JSON call per
// stdin line and writes exactly one JSON answer per call to stdout; everything
// else (client logs, diagnostics) goes to stderr. Rules it keeps: a call never
// outlives its timeout_ms (a hard guard answers even if the client hangs), the
// driver itself never retries, and errors carry Kafka's error name when the
// client exposes the code.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// defaultTimeoutMs is the protocol's default for a call without timeout_ms.
const defaultTimeoutMs = 15000

// maxLineBytes bounds one request line; calls are small JSON objects.
const maxLineBytes = 1 << 20

// driver is one admin client behind the line protocol.
type driver interface {
	// call performs one protocol call; the context's deadline is the call's
	// budget and timeout is the same budget as a duration, for clients that
	// take timeouts as settings rather than contexts.
	call(ctx context.Context, timeout time.Duration, name string, a args) (map[string]any, error)
	close()
}

// unsupportedError marks a call the client has no way to make.
type unsupportedError struct{ reason string }

func (e *unsupportedError) Error() string { return e.reason }

func unsupported(format string, v ...any) error {
	return &unsupportedError{reason: fmt.Sprintf(format, v...)}
}

type request struct {
	ID   json.RawMessage `json:"id"`
	Call string          `json:"call"`
	Args args            `json:"args"`
}

type outcome struct {
	result map[string]any
	err    error
}

func main() {
	os.Exit(run())
}

func run() int {
	flags := flag.NewFlagSet("matrix-driver", flag.ContinueOnError)
	flags.SetOutput(os.Stderr)
	bootstrap := flags.String("bootstrap", "", "HOST:PORT[,HOST:PORT...]")
	path := flags.String("path", "broker", "broker|controller")
	if len(os.Args) < 2 {
		return startFailure("usage: matrix-driver kadm|sarama --bootstrap HOST:PORT[,..] --path broker|controller")
	}
	client := os.Args[1]
	if client != "kadm" && client != "sarama" {
		return startFailure(fmt.Sprintf("unknown client %q (want kadm or sarama)", client))
	}
	if err := flags.Parse(os.Args[2:]); err != nil {
		return startFailure(err.Error())
	}
	if *bootstrap == "" {
		return startFailure("--bootstrap is required")
	}
	if *path != "broker" && *path != "controller" {
		return startFailure("--path must be broker or controller")
	}
	addrs := strings.Split(*bootstrap, ",")

	newDriver, version := newSaramaDriver, moduleVersion("github.com/IBM/sarama")
	if client == "kadm" {
		newDriver = newKadmDriver
		version = moduleVersion("github.com/twmb/franz-go/pkg/kadm") + " (franz-go " +
			moduleVersion("github.com/twmb/franz-go") + ")"
	}
	// Making the client may talk to the cluster (sarama fetches metadata
	// first); a silent cluster must not hold the ready line back forever.
	type started struct {
		d   driver
		err error
	}
	startDone := make(chan started, 1)
	go func() {
		d, err := newDriver(addrs, *path == "controller")
		startDone <- started{d, err}
	}()
	var d driver
	select {
	case s := <-startDone:
		if s.err != nil {
			return startFailure(s.err.Error())
		}
		d = s.d
	case <-time.After(defaultTimeoutMs * time.Millisecond):
		return startFailure(fmt.Sprintf("the client did not start within %d ms", defaultTimeoutMs))
	}
	defer d.close()
	emit(map[string]any{"ready": true, "client": client, "version": version})
	serve(d)
	return 0
}

func startFailure(msg string) int {
	emit(map[string]any{"ready": false, "error": msg})
	return 1
}

// serve answers calls until "close" or EOF.
func serve(d driver) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), maxLineBytes)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var req request
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			fmt.Fprintf(os.Stderr, "matrix-driver: bad request line: %v\n", err)
			emit(map[string]any{"id": nil, "status": "error", "error": "bad request: " + err.Error(), "retriable": false})
			continue
		}
		if req.Args == nil {
			req.Args = args{}
		}
		if req.Call == "close" {
			emit(map[string]any{"id": req.ID, "status": "ok", "result": map[string]any{}})
			return
		}
		answer(d, req)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "matrix-driver: reading stdin: %v\n", err)
	}
}

// answer runs one call under its budget and writes its one answer line.
func answer(d driver, req request) {
	timeoutMs, err := req.Args.optInt("timeout_ms", defaultTimeoutMs)
	if err != nil || timeoutMs <= 0 {
		emit(map[string]any{"id": req.ID, "status": "error", "error": "bad timeout_ms", "retriable": false})
		return
	}
	budget := time.Duration(timeoutMs) * time.Millisecond
	// The client gets slightly less than the budget so that its own timeout
	// error, with its own text, normally wins over the hard guard below.
	clientBudget := budget - budget/10
	ctx, cancel := context.WithTimeout(context.Background(), clientBudget)
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{err: fmt.Errorf("client panicked: %v", p)}
			}
		}()
		r, err := d.call(ctx, clientBudget, req.Call, req.Args)
		done <- outcome{r, err}
	}()
	guard := time.NewTimer(budget)
	defer guard.Stop()
	select {
	case o := <-done:
		emitOutcome(req.ID, o)
	case <-guard.C:
		// The client ignored its deadline (sarama takes no context); the call
		// keeps running in the background, but the answer is due now.
		emit(map[string]any{"id": req.ID, "status": "error",
			"error": fmt.Sprintf("timeout: no answer from the client within %d ms", timeoutMs), "retriable": true})
	}
}

func emitOutcome(id json.RawMessage, o outcome) {
	if o.err == nil {
		if o.result == nil {
			o.result = map[string]any{}
		}
		emit(map[string]any{"id": id, "status": "ok", "result": o.result})
		return
	}
	var unsup *unsupportedError
	if errors.As(o.err, &unsup) {
		emit(map[string]any{"id": id, "status": "unsupported", "reason": unsup.reason})
		return
	}
	name, retriable := describeError(o.err)
	fmt.Fprintf(os.Stderr, "matrix-driver: call failed: %v\n", o.err)
	emit(map[string]any{"id": id, "status": "error", "error": name, "retriable": retriable})
}

var stdout = bufio.NewWriter(os.Stdout)

func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"id": v["id"], "status": "error",
			"error": "driver could not encode its answer: " + err.Error(), "retriable": false})
	}
	stdout.Write(b)
	stdout.WriteByte('\n')
	stdout.Flush()
}

// moduleVersion reads a dependency's version from the build info, so the
// ready line reports what was really linked.
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == path {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}
