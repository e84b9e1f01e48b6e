// Shared pieces of both drivers: reading call arguments, naming errors the way
// Kafka does, and the Java enum names the protocol uses for ACL fields.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
)

// args is one call's "args" object as decoded JSON.
type args map[string]any

func (a args) str(key string) (string, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return "", fmt.Errorf("missing argument %q", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("argument %q must be a string", key)
	}
	return s, nil
}

func (a args) optStr(key, def string) (string, error) {
	if v, ok := a[key]; !ok || v == nil {
		return def, nil
	}
	return a.str(key)
}

func (a args) optInt(key string, def int64) (int64, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return def, nil
	}
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) {
		return 0, fmt.Errorf("argument %q must be an integer", key)
	}
	return int64(f), nil
}

func (a args) integer(key string) (int64, error) {
	if v, ok := a[key]; !ok || v == nil {
		return 0, fmt.Errorf("missing argument %q", key)
	}
	return a.optInt(key, 0)
}

func (a args) optBool(key string) (bool, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("argument %q must be a boolean", key)
	}
	return b, nil
}

// strMap reads a {k: v} object; non-string scalars are rendered as text
// because config values travel as strings in Kafka.
func (a args) strMap(key string) (map[string]string, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return map[string]string{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("argument %q must be an object", key)
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		switch t := x.(type) {
		case string:
			out[k] = t
		case float64:
			out[k] = strconv.FormatFloat(t, 'f', -1, 64)
		case bool:
			out[k] = strconv.FormatBool(t)
		default:
			return nil, fmt.Errorf("argument %q: value of %q must be a scalar", key, k)
		}
	}
	return out, nil
}

func (a args) floatMap(key string) (map[string]float64, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return map[string]float64{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("argument %q must be an object", key)
	}
	out := make(map[string]float64, len(m))
	for k, x := range m {
		f, ok := x.(float64)
		if !ok {
			return nil, fmt.Errorf("argument %q: value of %q must be a number", key, k)
		}
		out[k] = f
	}
	return out, nil
}

func (a args) strList(key string) ([]string, error) {
	v, ok := a[key]
	if !ok || v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("argument %q must be a list", key)
	}
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("argument %q must be a list of strings", key)
		}
		out = append(out, s)
	}
	return out, nil
}

// entity reads the quota entity {"user": name} or {"client-id": id}: its
// type and name (nil name = the default entity, JSON null).
func (a args) entity() (string, *string, error) {
	v, ok := a["entity"].(map[string]any)
	if !ok || len(v) != 1 {
		return "", nil, errors.New(`argument "entity" must be an object with one key (user or client-id)`)
	}
	for k, x := range v {
		if k != "user" && k != "client-id" && k != "ip" {
			return "", nil, fmt.Errorf("unknown quota entity type %q", k)
		}
		if x == nil {
			return k, nil, nil
		}
		s, ok := x.(string)
		if !ok {
			return "", nil, fmt.Errorf("quota entity %q must name a string", k)
		}
		return k, &s, nil
	}
	panic("unreachable")
}

// Kafka's Java enum names for ACL fields, with their wire codes (the same in
// every client, so both drivers share these tables).
var (
	aclOperations = map[string]int8{
		"UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6,
		"ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
		"ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14,
	}
	aclPermissions = map[string]int8{"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}
	resourceTypes  = map[string]int8{
		"UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4,
		"TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6, "USER": 7,
	}
	patternTypes = map[string]int8{"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
)

func enumCode(table map[string]int8, what string, a args, key string) (int8, error) {
	s, err := a.str(key)
	if err != nil {
		return 0, err
	}
	c, ok := table[s]
	if !ok {
		return 0, fmt.Errorf("unknown %s %q", what, s)
	}
	return c, nil
}

func enumName(table map[string]int8, code int8) string {
	for name, c := range table {
		if c == code {
			return name
		}
	}
	return strconv.Itoa(int(code))
}

// aclSpec is a fully specified ACL binding as the protocol's create_acl and
// delete_acls calls give it.
type aclSpec struct {
	principal, host       string
	operation, permission int8
	resourceType, pattern int8
	resourceName          string
}

func readACL(a args) (aclSpec, error) {
	var s aclSpec
	var err error
	if s.principal, err = a.str("principal"); err != nil {
		return s, err
	}
	if s.host, err = a.optStr("host", "*"); err != nil {
		return s, err
	}
	if s.operation, err = enumCode(aclOperations, "operation", a, "operation"); err != nil {
		return s, err
	}
	if s.permission, err = enumCode(aclPermissions, "permission", a, "permission"); err != nil {
		return s, err
	}
	if s.resourceType, err = enumCode(resourceTypes, "resource type", a, "resource_type"); err != nil {
		return s, err
	}
	if s.resourceName, err = a.str("resource_name"); err != nil {
		return s, err
	}
	if s.pattern, err = enumCode(patternTypes, "pattern type", a, "pattern"); err != nil {
		return s, err
	}
	return s, nil
}

func aclResult(principal, host string, operation, permission int8) map[string]any {
	return map[string]any{
		"principal":  principal,
		"host":       host,
		"operation":  enumName(aclOperations, operation),
		"permission": enumName(aclPermissions, permission),
	}
}

// sortACLs orders described ACLs so answers are stable across runs.
func sortACLs(l []map[string]any) {
	key := func(m map[string]any) string {
		return fmt.Sprint(m["principal"], "\x00", m["host"], "\x00", m["operation"], "\x00", m["permission"])
	}
	sort.Slice(l, func(i, j int) bool { return key(l[i]) < key(l[j]) })
}

// describeError names an error for the protocol: Kafka's error name when the
// client exposes the code, else the client's own text; and whether retrying
// could help.
func describeError(err error) (string, bool) {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message, ke.Retriable
	}
	var se sarama.KError
	if errors.As(err, &se) {
		// sarama's KError is Kafka's numeric code; its String() is prose, so
		// the name comes from franz-go's table of the same codes.
		if named, ok := kerr.ErrorForCode(int16(se)).(*kerr.Error); ok && (named.Code == int16(se)) {
			return named.Message, named.Retriable
		}
		return se.Error(), false
	}
	return err.Error(), transientError(err)
}

// transientError says whether a non-Kafka error (a timeout, a dropped or
// refused connection) is the kind that a later try may not hit.
func transientError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, sarama.ErrControllerNotAvailable) {
		return true
	}
	// kgo's errUnknownController (unexported): the controller is not known for now,
	// franz-go's counterpart of sarama.ErrControllerNotAvailable.
	if strings.HasPrefix(err.Error(), "broker replied that the controller broker") {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func sortedInt32s(in []int32) []int {
	out := make([]int, len(in))
	for i, v := range in {
		out[i] = int(v)
	}
	sort.Ints(out)
	return out
}

// configResourceName checks the protocol's resource argument.
func configResource(a args) (string, string, error) {
	res, err := a.str("resource")
	if err != nil {
		return "", "", err
	}
	if res != "topic" && res != "broker" {
		return "", "", fmt.Errorf("unknown config resource %q (want topic or broker)", res)
	}
	name, err := a.optStr("name", "")
	if err != nil {
		return "", "", err
	}
	return res, name, nil
}
