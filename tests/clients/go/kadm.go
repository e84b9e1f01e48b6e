// The franz-go driver: kadm's admin client over one kgo.Client. Calls kadm has
// no method for (describe_quorum) go through the same kgo.Client as kmsg
// requests, which is how franz-go exposes every admin API kadm does not wrap.
package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataTopic is KRaft's metadata log, the partition DescribeQuorum names.
const metadataTopic = "__cluster_metadata"

type kadmDriver struct {
	kgo *kgo.Client
	adm *kadm.Client
	// retryBudgetNs bounds kgo's own retries of one call (read by kgo's
	// RetryTimeoutFn), kept well under the call's timeout_ms.
	retryBudgetNs atomic.Int64
}

// newKadmDriver makes the client. kgo has no separate setting for
// controllers, so --path controller bootstraps from them as if they were
// brokers.
func newKadmDriver(addrs []string, _ bool) (driver, error) {
	d := &kadmDriver{}
	d.retryBudgetNs.Store(int64(defaultTimeoutMs * time.Millisecond / 2))
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.ClientID("kraftwerk-matrix-kadm"),
		kgo.DialTimeout(5*time.Second),
		// kadm answers ListTopics from kgo's metadata cache while it is younger than
		// MetadataMinAge (default 5 s): a topic just created would not be listed, a
		// topic just deleted still would. The matrix checks the cluster's answers, so
		// the cache is kept to kgo's minimum (10 ms) and every call asks a node.
		kgo.MetadataMinAge(10*time.Millisecond),
		kgo.RetryTimeoutFn(func(int16) time.Duration { return time.Duration(d.retryBudgetNs.Load()) }),
	)
	if err != nil {
		return nil, err
	}
	d.kgo = cl
	d.adm = kadm.NewClient(cl)
	return d, nil
}

func (d *kadmDriver) close() { d.adm.Close() }

func (d *kadmDriver) call(ctx context.Context, timeout time.Duration, name string, a args) (map[string]any, error) {
	d.retryBudgetNs.Store(int64(timeout / 2))
	// The request-level timeout (CreateTopics, UpdateFeatures, ...) is the
	// call's budget; the driver answers one call at a time, so setting it
	// here does not race with another request.
	d.adm.SetTimeoutMillis(int32(timeout / time.Millisecond))
	switch name {
	case "describe_cluster":
		return d.describeCluster(ctx)
	case "describe_features":
		return d.describeFeatures(ctx)
	case "update_features":
		return d.updateFeatures(ctx, a)
	case "describe_quorum":
		return d.describeQuorum(ctx)
	case "create_topic":
		return d.createTopic(ctx, a)
	case "list_topics":
		return d.listTopics(ctx)
	case "describe_topic":
		return d.describeTopic(ctx, a)
	case "create_partitions":
		return d.createPartitions(ctx, a)
	case "delete_topic":
		return d.deleteTopic(ctx, a)
	case "describe_configs":
		return d.describeConfigs(ctx, a)
	case "alter_configs":
		return d.alterConfigs(ctx, a, false)
	case "incremental_alter_configs":
		return d.alterConfigs(ctx, a, true)
	case "alter_client_quotas":
		return d.alterClientQuotas(ctx, a)
	case "describe_client_quotas":
		return d.describeClientQuotas(ctx, a)
	case "create_acl":
		return d.createACL(ctx, a)
	case "describe_acls":
		return d.describeACLs(ctx, a)
	case "delete_acls":
		return d.deleteACLs(ctx, a)
	case "alter_scram":
		return d.alterSCRAM(ctx, a)
	case "describe_scram":
		return d.describeSCRAM(ctx, a)
	}
	return nil, unsupported("unknown call %q", name)
}

func (d *kadmDriver) describeCluster(ctx context.Context) (map[string]any, error) {
	m, err := d.adm.BrokerMetadata(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"cluster_id":    m.Cluster,
		"broker_ids":    sortedInt32s(m.Brokers.NodeIDs()),
		"controller_id": int(m.Controller),
	}, nil
}

// describeFeatures reads the features from kadm's ApiVersions answers
// (kadm has no DescribeFeatures; Kafka serves features in ApiVersions).
func (d *kadmDriver) describeFeatures(ctx context.Context) (map[string]any, error) {
	vs, err := d.adm.ApiVersions(ctx)
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			if firstErr == nil {
				firstErr = v.Err
			}
			continue
		}
		raw := v.Raw()
		finalized := map[string]any{}
		for _, f := range raw.FinalizedFeatures {
			finalized[f.Name] = int(f.MaxVersionLevel)
		}
		supported := map[string]any{}
		for _, f := range raw.SupportedFeatures {
			supported[f.Name] = []int{int(f.MinVersion), int(f.MaxVersion)}
		}
		return map[string]any{"finalized": finalized, "supported": supported}, nil
	}
	if firstErr == nil {
		firstErr = errors.New("no broker answered ApiVersions")
	}
	return nil, firstErr
}

var upgradeTypes = map[string]int8{"upgrade": 1, "safe_downgrade": 2, "unsafe_downgrade": 3}

func (d *kadmDriver) updateFeatures(ctx context.Context, a args) (map[string]any, error) {
	feature, err := a.str("feature")
	if err != nil {
		return nil, err
	}
	level, err := a.integer("level")
	if err != nil {
		return nil, err
	}
	kind, err := a.optStr("type", "upgrade")
	if err != nil {
		return nil, err
	}
	upgradeType, ok := upgradeTypes[kind]
	if !ok {
		return nil, fmt.Errorf("unknown upgrade type %q", kind)
	}
	validateOnly, err := a.optBool("validate_only")
	if err != nil {
		return nil, err
	}
	res, err := d.adm.UpdateFeatures(ctx, validateOnly, kadm.FeatureUpdate{
		Feature: feature, MaxVersionLevel: int16(level), UpgradeType: upgradeType,
	})
	if err != nil {
		return nil, err
	}
	if err := res.Error(); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// describeQuorum sends kmsg's DescribeQuorum through the admin client's kgo
// client: kadm wraps no DescribeQuorum, kmsg is franz-go's way to reach it.
func (d *kadmDriver) describeQuorum(ctx context.Context) (map[string]any, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = metadataTopic
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	p.Partition = 0
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, d.kgo)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, err
			}
			voters := make([]int32, 0, len(rp.CurrentVoters))
			for _, v := range rp.CurrentVoters {
				voters = append(voters, v.ReplicaID)
			}
			observers := make([]int32, 0, len(rp.Observers))
			for _, o := range rp.Observers {
				observers = append(observers, o.ReplicaID)
			}
			return map[string]any{
				"leader_id": int(rp.LeaderID),
				"voters":    sortedInt32s(voters),
				"observers": sortedInt32s(observers),
			}, nil
		}
	}
	return nil, errors.New("DescribeQuorum answer names no partition")
}

func (d *kadmDriver) createTopic(ctx context.Context, a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	partitions, err := a.optInt("partitions", -1)
	if err != nil {
		return nil, err
	}
	rf, err := a.optInt("replication_factor", -1)
	if err != nil {
		return nil, err
	}
	configs, err := a.strMap("configs")
	if err != nil {
		return nil, err
	}
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = kadm.StringPtr(v)
	}
	resp, err := d.adm.CreateTopic(ctx, int32(partitions), int16(rf), cfg, name)
	if err != nil {
		return nil, err
	}
	return nil, withMessage(resp.Err, resp.ErrMessage)
}

func (d *kadmDriver) listTopics(ctx context.Context) (map[string]any, error) {
	// ListTopics leaves internal topics out, as the protocol asks.
	topics, err := d.adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(topics))
	for _, t := range topics.Sorted() {
		if t.Err != nil {
			return nil, t.Err
		}
		names = append(names, t.Topic)
	}
	sort.Strings(names)
	return map[string]any{"topics": names}, nil
}

func (d *kadmDriver) describeTopic(ctx context.Context, a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	m, err := d.adm.Metadata(ctx, name)
	if err != nil {
		return nil, err
	}
	t, ok := m.Topics[name]
	if !ok {
		return nil, kerr.UnknownTopicOrPartition
	}
	if t.Err != nil {
		return nil, t.Err
	}
	return map[string]any{"partitions": len(t.Partitions)}, nil
}

func (d *kadmDriver) createPartitions(ctx context.Context, a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	total, err := a.integer("total")
	if err != nil {
		return nil, err
	}
	res, err := d.adm.UpdatePartitions(ctx, int(total), name)
	if err != nil {
		return nil, err
	}
	r, ok := res[name]
	if !ok {
		return nil, fmt.Errorf("CreatePartitions answer does not name topic %q", name)
	}
	return nil, withMessage(r.Err, r.ErrMessage)
}

func (d *kadmDriver) deleteTopic(ctx context.Context, a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	resp, err := d.adm.DeleteTopic(ctx, name)
	if err != nil {
		return nil, err
	}
	return nil, withMessage(resp.Err, resp.ErrMessage)
}

// brokerIDs turns a broker resource name into kadm's argument: "" is the
// cluster-wide default resource (no broker ids), otherwise one node id.
func brokerIDs(name string) ([]int32, error) {
	if name == "" {
		return nil, nil
	}
	id, err := strconv.ParseInt(name, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("broker resource name %q is not a node id", name)
	}
	return []int32{int32(id)}, nil
}

func (d *kadmDriver) describeConfigs(ctx context.Context, a args) (map[string]any, error) {
	res, name, err := configResource(a)
	if err != nil {
		return nil, err
	}
	keys, err := a.strList("keys")
	if err != nil {
		return nil, err
	}
	var rcs kadm.ResourceConfigs
	if res == "topic" {
		rcs, err = d.adm.DescribeTopicConfigs(ctx, name)
	} else {
		ids, idErr := brokerIDs(name)
		if idErr != nil {
			return nil, idErr
		}
		rcs, err = d.adm.DescribeBrokerConfigs(ctx, ids...)
	}
	if err != nil {
		return nil, err
	}
	rc, err := rcs.On(name, nil)
	if err != nil {
		return nil, fmt.Errorf("DescribeConfigs answer does not name resource %q", name)
	}
	if rc.Err != nil {
		return nil, withMessage(rc.Err, rc.ErrMessage)
	}
	values := make(map[string]any, len(keys))
	for _, k := range keys {
		values[k] = nil
	}
	for _, c := range rc.Configs {
		if _, asked := values[c.Key]; asked && c.Value != nil {
			values[c.Key] = *c.Value
		}
	}
	return map[string]any{"configs": values}, nil
}

// alterConfigs is both the legacy AlterConfigs (kadm's ...State methods,
// which replace the whole set) and IncrementalAlterConfigs.
func (d *kadmDriver) alterConfigs(ctx context.Context, a args, incremental bool) (map[string]any, error) {
	res, name, err := configResource(a)
	if err != nil {
		return nil, err
	}
	var ops []kadm.AlterConfig
	if incremental {
		set, err := a.strMap("set")
		if err != nil {
			return nil, err
		}
		del, err := a.strList("delete")
		if err != nil {
			return nil, err
		}
		for k, v := range set {
			ops = append(ops, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
		}
		for _, k := range del {
			ops = append(ops, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
	} else {
		configs, err := a.strMap("configs")
		if err != nil {
			return nil, err
		}
		for k, v := range configs {
			ops = append(ops, kadm.AlterConfig{Name: k, Value: kadm.StringPtr(v)})
		}
	}
	var rs kadm.AlterConfigsResponses
	switch {
	case res == "topic" && incremental:
		rs, err = d.adm.AlterTopicConfigs(ctx, ops, name)
	case res == "topic":
		rs, err = d.adm.AlterTopicConfigsState(ctx, ops, name)
	default:
		ids, idErr := brokerIDs(name)
		if idErr != nil {
			return nil, idErr
		}
		if incremental {
			rs, err = d.adm.AlterBrokerConfigs(ctx, ops, ids...)
		} else {
			rs, err = d.adm.AlterBrokerConfigsState(ctx, ops, ids...)
		}
	}
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, errors.New("AlterConfigs answer names no resource")
	}
	for _, r := range rs {
		if r.Err != nil {
			return nil, withMessage(r.Err, r.ErrMessage)
		}
	}
	return nil, nil
}

func (d *kadmDriver) alterClientQuotas(ctx context.Context, a args) (map[string]any, error) {
	kind, entityName, err := a.entity()
	if err != nil {
		return nil, err
	}
	set, err := a.floatMap("set")
	if err != nil {
		return nil, err
	}
	remove, err := a.strList("remove")
	if err != nil {
		return nil, err
	}
	entry := kadm.AlterClientQuotaEntry{
		Entity: kadm.ClientQuotaEntity{{Type: kind, Name: entityName}},
	}
	for k, v := range set {
		entry.Ops = append(entry.Ops, kadm.AlterClientQuotaOp{Key: k, Value: v})
	}
	for _, k := range remove {
		entry.Ops = append(entry.Ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
	}
	rs, err := d.adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{entry})
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Err != nil {
			return nil, withMessage(r.Err, r.ErrMessage)
		}
	}
	return nil, nil
}

func (d *kadmDriver) describeClientQuotas(ctx context.Context, a args) (map[string]any, error) {
	kind, entityName, err := a.entity()
	if err != nil {
		return nil, err
	}
	comp := kadm.DescribeClientQuotaComponent{Type: kind, MatchName: entityName}
	if entityName == nil {
		comp.MatchType = kmsg.QuotasMatchTypeDefault
	}
	qs, err := d.adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{comp})
	if err != nil {
		return nil, err
	}
	quotas := map[string]any{}
	for _, q := range qs {
		if len(q.Entity) != 1 || q.Entity[0].Type != kind || !sameName(q.Entity[0].Name, entityName) {
			continue
		}
		for _, v := range q.Values {
			quotas[v.Key] = v.Value
		}
	}
	return map[string]any{"quotas": quotas}, nil
}

func sameName(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// aclBuilder names the resource of an ACL call in kadm's builder.
func aclBuilder(resourceType int8, name string) (*kadm.ACLBuilder, error) {
	b := kadm.NewACLs()
	switch resourceType {
	case resourceTypes["ANY"]:
		b.AnyResource(name)
	case resourceTypes["TOPIC"]:
		b.Topics(name)
	case resourceTypes["GROUP"]:
		b.Groups(name)
	case resourceTypes["CLUSTER"]:
		// kadm's builder always names the cluster resource kafka-cluster.
		if name != "kafka-cluster" {
			return nil, unsupported("kadm's ACL builder names the cluster resource only as kafka-cluster, not %q", name)
		}
		b.Clusters()
	case resourceTypes["TRANSACTIONAL_ID"]:
		b.TransactionalIDs(name)
	case resourceTypes["DELEGATION_TOKEN"]:
		b.DelegationTokens(name)
	default:
		return nil, unsupported("kadm's ACL builder has no resource type %s", enumName(resourceTypes, resourceType))
	}
	return b, nil
}

// fullACL builds one complete binding (create_acl, delete_acls).
func fullACL(s aclSpec) (*kadm.ACLBuilder, error) {
	b, err := aclBuilder(s.resourceType, s.resourceName)
	if err != nil {
		return nil, err
	}
	switch s.permission {
	case aclPermissions["ALLOW"]:
		b.Allow(s.principal).AllowHosts(s.host)
	case aclPermissions["DENY"]:
		b.Deny(s.principal).DenyHosts(s.host)
	default:
		return nil, unsupported("kadm's ACL builder takes ALLOW or DENY, not %s", enumName(aclPermissions, s.permission))
	}
	b.Operations(kmsg.ACLOperation(s.operation))
	b.ResourcePatternType(kmsg.ACLResourcePatternType(s.pattern))
	return b, nil
}

func (d *kadmDriver) createACL(ctx context.Context, a args) (map[string]any, error) {
	s, err := readACL(a)
	if err != nil {
		return nil, err
	}
	b, err := fullACL(s)
	if err != nil {
		return nil, err
	}
	rs, err := d.adm.CreateACLs(ctx, b)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, errors.New("CreateACLs answer has no result")
	}
	for _, r := range rs {
		if r.Err != nil {
			return nil, withMessage(r.Err, r.ErrMessage)
		}
	}
	return nil, nil
}

func (d *kadmDriver) describeACLs(ctx context.Context, a args) (map[string]any, error) {
	resourceType, err := enumCode(resourceTypes, "resource type", a, "resource_type")
	if err != nil {
		return nil, err
	}
	name, err := a.str("resource_name")
	if err != nil {
		return nil, err
	}
	pattern, err := enumCode(patternTypes, "pattern type", a, "pattern")
	if err != nil {
		return nil, err
	}
	b, err := aclBuilder(resourceType, name)
	if err != nil {
		return nil, err
	}
	// Any principal, host, operation and permission: the filter is the
	// resource alone.
	b.Allow().AllowHosts().Deny().DenyHosts().Operations()
	b.ResourcePatternType(kmsg.ACLResourcePatternType(pattern))
	rs, err := d.adm.DescribeACLs(ctx, b)
	if err != nil {
		return nil, err
	}
	acls := []map[string]any{}
	for _, r := range rs {
		if r.Err != nil {
			return nil, withMessage(r.Err, r.ErrMessage)
		}
		for _, x := range r.Described {
			acls = append(acls, aclResult(x.Principal, x.Host, int8(x.Operation), int8(x.Permission)))
		}
	}
	sortACLs(acls)
	return map[string]any{"acls": acls}, nil
}

func (d *kadmDriver) deleteACLs(ctx context.Context, a args) (map[string]any, error) {
	s, err := readACL(a)
	if err != nil {
		return nil, err
	}
	b, err := fullACL(s)
	if err != nil {
		return nil, err
	}
	rs, err := d.adm.DeleteACLs(ctx, b)
	if err != nil {
		return nil, err
	}
	deleted := 0
	for _, r := range rs {
		if r.Err != nil {
			return nil, withMessage(r.Err, r.ErrMessage)
		}
		for _, x := range r.Deleted {
			if x.Err != nil {
				return nil, withMessage(x.Err, x.ErrMessage)
			}
			deleted++
		}
	}
	return map[string]any{"deleted": deleted}, nil
}

var kadmMechanisms = map[string]kadm.ScramMechanism{
	"SCRAM-SHA-256": kadm.ScramSha256, "SCRAM-SHA-512": kadm.ScramSha512,
}

func mechanismName(code int8) string {
	switch code {
	case 1:
		return "SCRAM-SHA-256"
	case 2:
		return "SCRAM-SHA-512"
	}
	return "UNKNOWN(" + strconv.Itoa(int(code)) + ")"
}

func (d *kadmDriver) alterSCRAM(ctx context.Context, a args) (map[string]any, error) {
	user, err := a.str("user")
	if err != nil {
		return nil, err
	}
	mechName, err := a.str("mechanism")
	if err != nil {
		return nil, err
	}
	mech, ok := kadmMechanisms[mechName]
	if !ok {
		return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechName)
	}
	del, err := a.optBool("delete")
	if err != nil {
		return nil, err
	}
	var rs kadm.AlteredUserSCRAMs
	if del {
		rs, err = d.adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: mech}}, nil)
	} else {
		iterations, iterErr := a.optInt("iterations", 4096)
		if iterErr != nil {
			return nil, iterErr
		}
		password, pwErr := a.str("password")
		if pwErr != nil {
			return nil, pwErr
		}
		rs, err = d.adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
			User: user, Mechanism: mech, Iterations: int32(iterations), Password: password,
		}})
	}
	if err != nil {
		return nil, err
	}
	r, ok := rs[user]
	if !ok {
		return nil, fmt.Errorf("AlterUserScramCredentials answer does not name user %q", user)
	}
	return nil, withMessage(r.Err, r.ErrMessage)
}

func (d *kadmDriver) describeSCRAM(ctx context.Context, a args) (map[string]any, error) {
	users, err := a.strList("users")
	if err != nil {
		return nil, err
	}
	ds, err := d.adm.DescribeUserSCRAMs(ctx, users...)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, u := range ds.Sorted() {
		if u.Err != nil {
			return nil, withMessage(u.Err, u.ErrMessage)
		}
		creds := []map[string]any{}
		for _, c := range u.CredInfos {
			creds = append(creds, map[string]any{"mechanism": mechanismName(int8(c.Mechanism)), "iterations": int(c.Iterations)})
		}
		out[u.User] = creds
	}
	return map[string]any{"users": out}, nil
}

// withMessage keeps the server's error message next to the error (for the
// driver's stderr log) without hiding the Kafka error it wraps.
func withMessage(err error, msg string) error {
	if err == nil || msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, msg)
}
