// The sarama driver: IBM/sarama's ClusterAdmin. sarama takes no contexts, so
// each call's budget becomes sarama's network timeouts (set before the call;
// calls are answered one at a time) and the hard guard in main.go.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// saramaVersion is the newest Kafka release sarama v1.61 knows of that
// kraftwerk models; sarama clamps each request to the versions the node
// advertises in ApiVersions.
var saramaVersion = sarama.V4_0_0_0

// saltBytes is the SCRAM salt length the driver generates (sarama leaves the
// salt to its caller).
const saltBytes = 24

// startTimeout bounds each network step of sarama's start (dial, metadata).
const startTimeout = 5 * time.Second

type saramaDriver struct {
	conf  *sarama.Config
	admin sarama.ClusterAdmin
}

// newSaramaDriver connects: sarama's ClusterAdmin needs the cluster's
// metadata and controller before it exists. sarama has no controller
// bootstrap setting, so --path controller bootstraps from the controllers as
// if they were brokers.
func newSaramaDriver(addrs []string, _ bool) (driver, error) {
	conf := sarama.NewConfig()
	conf.ClientID = "kraftwerk-matrix-sarama"
	conf.Version = saramaVersion
	// sarama's own retries stay few and short: the harness decides what a
	// failure means, and every call must answer within its timeout_ms.
	conf.Admin.Retry.Max = 2
	conf.Admin.Retry.Backoff = 100 * time.Millisecond
	conf.Metadata.Retry.Max = 1
	conf.Metadata.Retry.Backoff = 100 * time.Millisecond
	// Starting needs metadata from one node; a silent node must not hold the
	// ready line back for long (each call sets its own timeouts later).
	setSaramaTimeouts(conf, startTimeout)
	admin, err := sarama.NewClusterAdmin(addrs, conf)
	if err != nil {
		return nil, err
	}
	return &saramaDriver{conf: conf, admin: admin}, nil
}

func setSaramaTimeouts(conf *sarama.Config, timeout time.Duration) {
	conf.Admin.Timeout = timeout
	conf.Net.DialTimeout = timeout
	conf.Net.ReadTimeout = timeout
	conf.Net.WriteTimeout = timeout
}

func (d *saramaDriver) close() { _ = d.admin.Close() }

func (d *saramaDriver) call(_ context.Context, timeout time.Duration, name string, a args) (map[string]any, error) {
	setSaramaTimeouts(d.conf, timeout)
	switch name {
	case "describe_cluster":
		return d.describeCluster()
	case "describe_features":
		return nil, unsupported("sarama's ClusterAdmin has no DescribeFeatures call")
	case "update_features":
		return d.updateFeatures(a)
	case "describe_quorum":
		return nil, unsupported("sarama's ClusterAdmin has no DescribeQuorum call")
	case "create_topic":
		return d.createTopic(a)
	case "list_topics":
		return d.listTopics()
	case "describe_topic":
		return d.describeTopic(a)
	case "create_partitions":
		return d.createPartitions(a)
	case "delete_topic":
		return d.deleteTopic(a)
	case "describe_configs":
		return d.describeConfigs(a)
	case "alter_configs":
		return d.alterConfigs(a)
	case "incremental_alter_configs":
		return d.incrementalAlterConfigs(a)
	case "alter_client_quotas":
		return d.alterClientQuotas(a)
	case "describe_client_quotas":
		return d.describeClientQuotas(a)
	case "create_acl":
		return d.createACL(a)
	case "describe_acls":
		return d.describeACLs(a)
	case "delete_acls":
		return d.deleteACLs(a)
	case "alter_scram":
		return d.alterSCRAM(a)
	case "describe_scram":
		return d.describeSCRAM(a)
	}
	return nil, unsupported("unknown call %q", name)
}

func (d *saramaDriver) describeCluster() (map[string]any, error) {
	brokers, controllerID, err := d.admin.DescribeCluster()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, 0, len(brokers))
	for _, b := range brokers {
		ids = append(ids, b.ID())
	}
	return map[string]any{
		// ClusterAdmin.DescribeCluster returns brokers and controller only;
		// sarama does not expose the cluster id it receives.
		"cluster_id":    nil,
		"broker_ids":    sortedInt32s(ids),
		"controller_id": int(controllerID),
	}, nil
}

// updateFeatures maps the protocol onto sarama's UpdateFeatures, which
// speaks UpdateFeatures v0 only: a boolean AllowDowngrade, no upgrade type
// and no validate-only. A KRaft controller reads the upgrade type, which v0
// cannot carry (always "upgrade"), and ignores AllowDowngrade, so no
// downgrade can be asked for through sarama.
func (d *saramaDriver) updateFeatures(a args) (map[string]any, error) {
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
	validateOnly, err := a.optBool("validate_only")
	if err != nil {
		return nil, err
	}
	if validateOnly {
		return nil, unsupported("sarama's UpdateFeatures (v0 only) has no validate-only flag")
	}
	switch kind {
	case "upgrade":
	case "safe_downgrade", "unsafe_downgrade":
		return nil, unsupported("sarama's UpdateFeatures (v0 only) cannot ask for a downgrade: " +
			"a KRaft controller ignores v0's AllowDowngrade and reads the upgrade type v0 lacks")
	default:
		return nil, fmt.Errorf("unknown upgrade type %q", kind)
	}
	results, err := d.admin.UpdateFeatures([]sarama.FeatureUpdate{{
		Feature: feature, MaxVersionLevel: int16(level),
	}})
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			return nil, withMessage(r.ErrorCode, deref(r.ErrorMessage))
		}
	}
	return nil, nil
}

func (d *saramaDriver) createTopic(a args) (map[string]any, error) {
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
	entries := make(map[string]*string, len(configs))
	for k, v := range configs {
		entries[k] = &v
	}
	return nil, d.admin.CreateTopic(name, &sarama.TopicDetail{
		NumPartitions: int32(partitions), ReplicationFactor: int16(rf), ConfigEntries: entries,
	}, false)
}

// internalTopics are the names Kafka marks internal. sarama's ListTopics
// does not pass the metadata's is-internal flag on, so the driver leaves
// these names out itself, as the protocol's list_topics asks.
var internalTopics = map[string]bool{
	"__consumer_offsets": true, "__transaction_state": true, "__share_group_state": true,
}

func (d *saramaDriver) listTopics() (map[string]any, error) {
	topics, err := d.admin.ListTopics()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		if !internalTopics[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return map[string]any{"topics": names}, nil
}

func (d *saramaDriver) describeTopic(a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	mds, err := d.admin.DescribeTopics([]string{name})
	if err != nil {
		return nil, err
	}
	for _, md := range mds {
		if md.Name != name {
			continue
		}
		if !errors.Is(md.Err, sarama.ErrNoError) {
			return nil, md.Err
		}
		return map[string]any{"partitions": len(md.Partitions)}, nil
	}
	return nil, fmt.Errorf("metadata answer does not name topic %q", name)
}

func (d *saramaDriver) createPartitions(a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	total, err := a.integer("total")
	if err != nil {
		return nil, err
	}
	return nil, d.admin.CreatePartitions(name, int32(total), nil, false)
}

func (d *saramaDriver) deleteTopic(a args) (map[string]any, error) {
	name, err := a.str("name")
	if err != nil {
		return nil, err
	}
	return nil, d.admin.DeleteTopic(name)
}

func saramaResource(res string) sarama.ConfigResourceType {
	if res == "topic" {
		return sarama.TopicResource
	}
	return sarama.BrokerResource
}

func (d *saramaDriver) describeConfigs(a args) (map[string]any, error) {
	res, name, err := configResource(a)
	if err != nil {
		return nil, err
	}
	keys, err := a.strList("keys")
	if err != nil {
		return nil, err
	}
	results, err := d.admin.DescribeConfigs([]*sarama.ConfigResource{{
		Type: saramaResource(res), Name: name, ConfigNames: keys,
	}}, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		if r.Name != name {
			continue
		}
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			return nil, withMessage(r.ErrorCode, r.ErrorMsg)
		}
		values := make(map[string]any, len(keys))
		for _, k := range keys {
			values[k] = nil
		}
		for _, c := range r.Configs {
			if _, asked := values[c.Name]; asked && !c.Sensitive {
				values[c.Name] = c.Value
			}
		}
		return map[string]any{"configs": values}, nil
	}
	return nil, fmt.Errorf("DescribeConfigs answer does not name resource %q", name)
}

func (d *saramaDriver) alterConfigs(a args) (map[string]any, error) {
	res, name, err := configResource(a)
	if err != nil {
		return nil, err
	}
	configs, err := a.strMap("configs")
	if err != nil {
		return nil, err
	}
	entries := make(map[string]*string, len(configs))
	for k, v := range configs {
		entries[k] = &v
	}
	return nil, d.admin.AlterConfig(saramaResource(res), name, entries, false)
}

func (d *saramaDriver) incrementalAlterConfigs(a args) (map[string]any, error) {
	res, name, err := configResource(a)
	if err != nil {
		return nil, err
	}
	set, err := a.strMap("set")
	if err != nil {
		return nil, err
	}
	del, err := a.strList("delete")
	if err != nil {
		return nil, err
	}
	entries := make(map[string]sarama.IncrementalAlterConfigsEntry, len(set)+len(del))
	for k, v := range set {
		entries[k] = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}
	}
	for _, k := range del {
		entries[k] = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationDelete}
	}
	return nil, d.admin.IncrementalAlterConfig(saramaResource(res), name, entries, false)
}

func saramaEntity(a args) (sarama.QuotaEntityComponent, error) {
	kind, name, err := a.entity()
	if err != nil {
		return sarama.QuotaEntityComponent{}, err
	}
	c := sarama.QuotaEntityComponent{EntityType: sarama.QuotaEntityType(kind), MatchType: sarama.QuotaMatchExact}
	if name == nil {
		c.MatchType = sarama.QuotaMatchDefault
	} else {
		c.Name = *name
	}
	return c, nil
}

// alterClientQuotas sends one AlterClientQuotas per quota key: sarama's
// AlterClientQuotas takes a single operation per call.
func (d *saramaDriver) alterClientQuotas(a args) (map[string]any, error) {
	entity, err := saramaEntity(a)
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
	var ops []sarama.ClientQuotasOp
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ops = append(ops, sarama.ClientQuotasOp{Key: k, Value: set[k]})
	}
	for _, k := range remove {
		ops = append(ops, sarama.ClientQuotasOp{Key: k, Remove: true})
	}
	for _, op := range ops {
		if err := d.admin.AlterClientQuotas([]sarama.QuotaEntityComponent{entity}, op, false); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (d *saramaDriver) describeClientQuotas(a args) (map[string]any, error) {
	entity, err := saramaEntity(a)
	if err != nil {
		return nil, err
	}
	entries, err := d.admin.DescribeClientQuotas([]sarama.QuotaFilterComponent{{
		EntityType: entity.EntityType, MatchType: entity.MatchType, Match: entity.Name,
	}}, true)
	if err != nil {
		return nil, err
	}
	quotas := map[string]any{}
	for _, e := range entries {
		if len(e.Entity) != 1 || e.Entity[0].EntityType != entity.EntityType ||
			e.Entity[0].MatchType != entity.MatchType || e.Entity[0].Name != entity.Name {
			continue
		}
		for k, v := range e.Values {
			quotas[k] = v
		}
	}
	return map[string]any{"quotas": quotas}, nil
}

func (d *saramaDriver) createACL(a args) (map[string]any, error) {
	s, err := readACL(a)
	if err != nil {
		return nil, err
	}
	return nil, d.admin.CreateACL(
		sarama.Resource{
			ResourceType:        sarama.AclResourceType(s.resourceType),
			ResourceName:        s.resourceName,
			ResourcePatternType: sarama.AclResourcePatternType(s.pattern),
		},
		sarama.Acl{
			Principal:      s.principal,
			Host:           s.host,
			Operation:      sarama.AclOperation(s.operation),
			PermissionType: sarama.AclPermissionType(s.permission),
		})
}

func (d *saramaDriver) describeACLs(a args) (map[string]any, error) {
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
	rs, err := d.admin.ListAcls(sarama.AclFilter{
		ResourceType:              sarama.AclResourceType(resourceType),
		ResourceName:              &name,
		ResourcePatternTypeFilter: sarama.AclResourcePatternType(pattern),
		Operation:                 sarama.AclOperationAny,
		PermissionType:            sarama.AclPermissionAny,
	})
	if err != nil {
		return nil, err
	}
	acls := []map[string]any{}
	for _, r := range rs {
		for _, x := range r.Acls {
			acls = append(acls, aclResult(x.Principal, x.Host, int8(x.Operation), int8(x.PermissionType)))
		}
	}
	sortACLs(acls)
	return map[string]any{"acls": acls}, nil
}

func (d *saramaDriver) deleteACLs(a args) (map[string]any, error) {
	s, err := readACL(a)
	if err != nil {
		return nil, err
	}
	matches, err := d.admin.DeleteACL(sarama.AclFilter{
		ResourceType:              sarama.AclResourceType(s.resourceType),
		ResourceName:              &s.resourceName,
		ResourcePatternTypeFilter: sarama.AclResourcePatternType(s.pattern),
		Principal:                 &s.principal,
		Host:                      &s.host,
		Operation:                 sarama.AclOperation(s.operation),
		PermissionType:            sarama.AclPermissionType(s.permission),
	}, false)
	if err != nil {
		return nil, err
	}
	for _, m := range matches {
		if !errors.Is(m.Err, sarama.ErrNoError) {
			return nil, withMessage(m.Err, deref(m.ErrMsg))
		}
	}
	return map[string]any{"deleted": len(matches)}, nil
}

var saramaMechanisms = map[string]sarama.ScramMechanismType{
	"SCRAM-SHA-256": sarama.SCRAM_MECHANISM_SHA_256, "SCRAM-SHA-512": sarama.SCRAM_MECHANISM_SHA_512,
}

func (d *saramaDriver) alterSCRAM(a args) (map[string]any, error) {
	user, err := a.str("user")
	if err != nil {
		return nil, err
	}
	mechName, err := a.str("mechanism")
	if err != nil {
		return nil, err
	}
	mech, ok := saramaMechanisms[mechName]
	if !ok {
		return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechName)
	}
	del, err := a.optBool("delete")
	if err != nil {
		return nil, err
	}
	var results []*sarama.AlterUserScramCredentialsResult
	if del {
		results, err = d.admin.DeleteUserScramCredentials([]sarama.AlterUserScramCredentialsDelete{{
			Name: user, Mechanism: mech,
		}})
	} else {
		iterations, iterErr := a.optInt("iterations", 4096)
		if iterErr != nil {
			return nil, iterErr
		}
		password, pwErr := a.str("password")
		if pwErr != nil {
			return nil, pwErr
		}
		salt := make([]byte, saltBytes)
		if _, randErr := rand.Read(salt); randErr != nil {
			return nil, randErr
		}
		results, err = d.admin.UpsertUserScramCredentials([]sarama.AlterUserScramCredentialsUpsert{{
			Name: user, Mechanism: mech, Iterations: int32(iterations), Salt: salt, Password: []byte(password),
		}})
	}
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			return nil, withMessage(r.ErrorCode, deref(r.ErrorMessage))
		}
	}
	if len(results) == 0 {
		return nil, errors.New("AlterUserScramCredentials answer has no result")
	}
	return nil, nil
}

func (d *saramaDriver) describeSCRAM(a args) (map[string]any, error) {
	users, err := a.strList("users")
	if err != nil {
		return nil, err
	}
	results, err := d.admin.DescribeUserScramCredentials(users)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, r := range results {
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			return nil, withMessage(r.ErrorCode, deref(r.ErrorMessage))
		}
		creds := []map[string]any{}
		for _, c := range r.CredentialInfos {
			creds = append(creds, map[string]any{"mechanism": mechanismName(int8(c.Mechanism)), "iterations": int(c.Iterations)})
		}
		out[r.User] = creds
	}
	return map[string]any{"users": out}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
