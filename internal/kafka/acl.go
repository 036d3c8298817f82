package kafka

import (
	"fmt"
	"slices"
	"strings"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/topics"
)

// The components whose Kafka ACLs ACLs lists: the long-running ones, and
// `topics`, the admin step that creates the topics.
const (
	ComponentIngest  = "ingest"
	ComponentProcess = "process"
	ComponentSink    = "sink"
	ComponentBridge  = "bridge"
	ComponentTopics  = "topics"
)

// Components are the components in the order docs/deploy.md lists them.
var Components = []string{ComponentIngest, ComponentProcess, ComponentSink, ComponentBridge, ComponentTopics}

// ACL is one Kafka ACL a component's principal needs: ALLOW of each
// operation on the resource (LITERAL: the name exactly; PREFIXED: every
// name that starts with it). Kafka implies DESCRIBE from READ and WRITE
// (and DESCRIBE_CONFIGS from ALTER_CONFIGS), so it is listed only where
// neither is granted.
type ACL struct {
	Resource   string // TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER
	Pattern    string // LITERAL or PREFIXED
	Name       string
	Operations []string
}

// TransactionalIDPrefix starts the transactional id of every instance of
// stream's processor (processors.TransactionalID appends the instance).
func TransactionalIDPrefix(stream string) string { return "driftguard-" + stream + "-" }

// ACLs are the ACLs component needs for cfg's streams: what docs/deploy.md
// lists, and what the ACL test grants and nothing more. The sink's group
// is clickhouse.consumer_group.
func ACLs(component string, cfg *config.Config) []ACL {
	var acls []ACL
	topic := func(name string, ops ...string) {
		acls = append(acls, ACL{Resource: "TOPIC", Pattern: "LITERAL", Name: name, Operations: ops})
	}
	for _, s := range cfg.StreamList() {
		n := topics.For(s.Name)
		switch component {
		case ComponentIngest:
			topic(n.In, "WRITE")
			if len(s.EphemeralTypes) > 0 {
				// Typing and the like, routed past the processors.
				topic(n.Ephemeral, "WRITE")
			}
		case ComponentProcess:
			// The processors check their topics' settings at start
			// (DESCRIBE_CONFIGS); an admin creates them first (`topics`),
			// or they need CREATE as well.
			for _, spec := range topics.Specs(s) {
				switch spec.Name {
				case n.In:
					topic(n.In, "READ", "DESCRIBE_CONFIGS")
				case n.Table:
					// Its changelog: written, and read back to restore.
					topic(n.Table, "READ", "WRITE", "DESCRIBE_CONFIGS")
				case n.Ephemeral:
					// Checked at start, written by ingest only.
					topic(n.Ephemeral, "DESCRIBE", "DESCRIBE_CONFIGS")
				default:
					topic(spec.Name, "WRITE", "DESCRIBE_CONFIGS")
				}
			}
			acls = append(acls,
				ACL{Resource: "GROUP", Pattern: "LITERAL", Name: topics.Group(s.Name), Operations: []string{"READ"}},
				ACL{Resource: "TRANSACTIONAL_ID", Pattern: "PREFIXED", Name: TransactionalIDPrefix(s.Name), Operations: []string{"WRITE"}})
		case ComponentSink:
			topic(n.State, "READ")
			topic(n.Outcomes, "READ")
			topic(n.DLQ, "READ")
		case ComponentBridge:
			topic(n.State, "READ")
			if s.Policy == config.PolicyAssign {
				topic(n.Outcomes, "READ")
			}
		case ComponentTopics:
			for _, spec := range topics.Specs(s) {
				topic(spec.Name, "CREATE", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS")
			}
		}
	}
	switch component {
	case ComponentSink:
		acls = append(acls, ACL{Resource: "GROUP", Pattern: "LITERAL", Name: cfg.ClickHouse.ConsumerGroup, Operations: []string{"READ"}})
	case ComponentTopics:
		// The brokers' defaults, read when a topic is created.
		acls = append(acls, ACL{Resource: "CLUSTER", Pattern: "LITERAL", Name: "kafka-cluster", Operations: []string{"DESCRIBE_CONFIGS"}})
	}
	return acls
}

// AccessOf is what Check asks about for acls: the topics read and
// written, and the groups of LITERAL ACLs. A PREFIXED transactional id
// says nothing of the id in use; its caller adds that.
func AccessOf(acls []ACL) Access {
	var a Access
	for _, acl := range acls {
		switch {
		case acl.Resource == "TOPIC" && slices.Contains(acl.Operations, "READ"):
			a.ReadTopics = append(a.ReadTopics, acl.Name)
		case acl.Resource == "TOPIC" && slices.Contains(acl.Operations, "WRITE"):
			a.WriteTopics = append(a.WriteTopics, acl.Name)
		case acl.Resource == "GROUP" && acl.Pattern == "LITERAL":
			a.Groups = append(a.Groups, acl.Name)
		}
	}
	return a
}

// Command is the kafka-acls command that grants acl to principal
// (User:name) through the admin's connection settings in admin.properties.
func (acl ACL) Command(principal string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-acls --bootstrap-server $BROKERS --command-config admin.properties --add --allow-principal %s", principal)
	for _, op := range acl.Operations {
		b.WriteString(" --operation " + kafkaACLsOperation(op))
	}
	switch acl.Resource {
	case "CLUSTER":
		b.WriteString(" --cluster")
	default:
		fmt.Fprintf(&b, " --%s %s", strings.ToLower(strings.ReplaceAll(acl.Resource, "_", "-")), acl.Name)
	}
	if acl.Pattern == "PREFIXED" {
		b.WriteString(" --resource-pattern-type prefixed")
	}
	return b.String()
}

// kafkaACLsOperation spells op as kafka-acls takes it (DescribeConfigs).
func kafkaACLsOperation(op string) string {
	var b strings.Builder
	for _, word := range strings.Split(op, "_") {
		b.WriteString(word[:1] + strings.ToLower(word[1:]))
	}
	return b.String()
}
