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
// name that starts with it). Kafka implies DESCRIBE from READ and WRITE,
// so it is listed only where neither is granted. `topics` creates topics
// with their settings (CREATE alone allows that) and reports settings that
// differ, never alters them: it needs no ALTER_CONFIGS.
type ACL struct {
	Resource   string // TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER
	Pattern    string // LITERAL or PREFIXED
	Name       string
	Operations []string
}

// ACLs are the ACLs component needs for cfg's streams: what docs/deploy.md
// lists, and what the ACL test grants and nothing more. Without prefixes
// they name each topic, group and transactional id (LITERAL, and PREFIXED
// for the transactional ids of a stream's instances). With
// kafka.topic_prefix, the topic ACLs are one PREFIXED ACL on it, and with
// kafka.group_prefix the group and transactional id ACLs are one each on
// that: a stream added later needs no new ACL.
func ACLs(component string, cfg *config.Config) []ACL {
	acls := byName(component, cfg)
	p := cfg.Kafka.Naming()
	var out []ACL
	for _, acl := range acls {
		prefix := p.GroupPrefix
		if acl.Resource == "TOPIC" {
			prefix = p.TopicPrefix
		}
		if prefix == "" || acl.Resource == "CLUSTER" {
			out = append(out, acl)
			continue
		}
		i := slices.IndexFunc(out, func(o ACL) bool { return o.Resource == acl.Resource && o.Pattern == "PREFIXED" && o.Name == prefix })
		if i < 0 {
			out = append(out, ACL{Resource: acl.Resource, Pattern: "PREFIXED", Name: prefix})
			i = len(out) - 1
		}
		for _, op := range acl.Operations {
			if !slices.Contains(out[i].Operations, op) {
				out[i].Operations = append(out[i].Operations, op)
			}
		}
	}
	return out
}

// Needs is what Check asks the brokers about before component starts:
// its topics and groups by name, whatever the prefixes.
func Needs(component string, cfg *config.Config) Access { return accessOf(byName(component, cfg)) }

// byName are component's ACLs on each of its resources by name.
func byName(component string, cfg *config.Config) []ACL {
	var acls []ACL
	topic := func(name string, ops ...string) {
		acls = append(acls, ACL{Resource: "TOPIC", Pattern: "LITERAL", Name: name, Operations: ops})
	}
	p := cfg.Kafka.Naming()
	for _, s := range cfg.StreamList() {
		n := p.For(s.Name)
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
			for _, spec := range topics.Specs(p, s) {
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
				ACL{Resource: "GROUP", Pattern: "LITERAL", Name: p.Group(s.Name), Operations: []string{"READ"}},
				// Every instance's id: the prefix of TransactionalID without one.
				ACL{Resource: "TRANSACTIONAL_ID", Pattern: "PREFIXED", Name: p.TransactionalID("", s.Name), Operations: []string{"WRITE"}})
		case ComponentSink:
			topic(n.State, "READ")
			topic(n.Outcomes, "READ")
			topic(n.DLQ, "READ")
			if s.Policy == config.PolicyGapless {
				// Replay requests and the relay's records (replay_requests).
				topic(n.Replay, "READ")
			}
		case ComponentBridge:
			topic(n.State, "READ")
			if s.Policy == config.PolicyAssign {
				topic(n.Outcomes, "READ")
				// Clients' sends and receipts.
				topic(n.In, "WRITE")
			}
			if s.Policy == config.PolicyAssign && s.Assign.Typing.Type != "" {
				// Typing: produced for a member's POST, read from its end.
				topic(n.Ephemeral, "READ", "WRITE")
			}
		case ComponentTopics:
			for _, spec := range topics.Specs(p, s) {
				topic(spec.Name, "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS")
			}
		}
	}
	switch component {
	case ComponentSink:
		acls = append(acls, ACL{Resource: "GROUP", Pattern: "LITERAL", Name: p.ConsumerGroup(cfg.ClickHouse.ConsumerGroup), Operations: []string{"READ"}})
	case ComponentTopics:
		// The brokers' defaults, read when a topic is created.
		acls = append(acls, ACL{Resource: "CLUSTER", Pattern: "LITERAL", Name: "kafka-cluster", Operations: []string{"DESCRIBE_CONFIGS"}})
	}
	return acls
}

// accessOf is what Check asks about for acls: the topics read and
// written, and the groups of LITERAL ACLs. A PREFIXED transactional id
// says nothing of the id in use; its caller adds that.
func accessOf(acls []ACL) Access {
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
