package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
)

// aclDocRows are the rows of docs/deploy.md's ACL table as kafka.ACLs
// gives them for a stream named <stream>: those only some streams need
// are marked with which, and the sink's group is
// <clickhouse.consumer_group>.
func aclDocRows(t *testing.T) []string {
	t.Helper()
	rows := func(s config.Stream) []string {
		s.Name = "<stream>"
		cfg := &config.Config{Streams: map[string]*config.Stream{s.Name: &s}}
		cfg.ClickHouse.ConsumerGroup = "<clickhouse.consumer_group>"
		var out []string
		for _, component := range kafka.Components {
			for _, acl := range kafka.ACLs(component, cfg) {
				out = append(out, fmt.Sprintf("| %s | %s | %s | `%s` | %s |", component, acl.Resource, acl.Pattern, acl.Name, strings.Join(acl.Operations, ", ")))
			}
		}
		return out
	}
	base := rows(config.Stream{Policy: config.PolicyLatest})
	out := slices.Clone(base)
	for _, variant := range []struct {
		note   string
		stream config.Stream
	}{
		{"gapless streams", config.Stream{Policy: config.PolicyGapless}},
		{"assign streams", config.Stream{Policy: config.PolicyAssign}},
		{"streams with ephemeral_types", config.Stream{Policy: config.PolicyLatest, EphemeralTypes: []string{"typing"}}},
		{"assign streams with assign.typing", config.Stream{Policy: config.PolicyAssign, EphemeralTypes: []string{"typing"},
			Assign: config.Assign{Typing: config.AssignTyping{Type: "typing"}}}},
	} {
		// A row an earlier variant listed is not listed again.
		variantRows := rows(variant.stream)
		for _, row := range variantRows {
			if !slices.Contains(base, row) {
				out = append(out, strings.Replace(row, "` |", "` ("+variant.note+") |", 1))
			}
		}
		base = append(base, variantRows...)
	}
	// With prefixes, one ACL per kind of resource, whatever the streams.
	all := &config.Config{Streams: map[string]*config.Stream{}}
	for i, s := range []config.Stream{{Policy: config.PolicyLatest}, {Policy: config.PolicyGapless}, {Policy: config.PolicyAssign, EphemeralTypes: []string{"typing"}, Assign: config.Assign{Typing: config.AssignTyping{Type: "typing"}}}} {
		s.Name = fmt.Sprintf("s%d", i)
		all.Streams[s.Name] = &s
	}
	all.Kafka.TopicPrefix, all.Kafka.GroupPrefix = "<topic_prefix>", "<group_prefix>"
	all.ClickHouse.ConsumerGroup = "sink"
	for _, component := range kafka.Components {
		for _, acl := range kafka.ACLs(component, all) {
			out = append(out, fmt.Sprintf("| %s | %s | %s | `%s` | %s |", component, acl.Resource, acl.Pattern, acl.Name, strings.Join(acl.Operations, ", ")))
		}
	}
	return out
}

var aclRow = regexp.MustCompile("^\\| (ingest|process|sink|bridge|topics) \\| (TOPIC|GROUP|TRANSACTIONAL_ID|CLUSTER) \\|")

// docs/deploy.md lists exactly the ACLs kafka.ACLs grants, which the
// secure broker test proves sufficient.
func TestDocsKafkaACLs(t *testing.T) {
	var table []string
	for _, line := range strings.Split(mustRead(t, "docs/deploy.md"), "\n") {
		if aclRow.MatchString(line) {
			table = append(table, line)
		}
	}
	want := aclDocRows(t)
	for _, row := range want {
		if !slices.Contains(table, row) {
			t.Errorf("docs/deploy.md lacks the ACL row\n%s", row)
		}
	}
	for _, row := range table {
		if !slices.Contains(want, row) {
			t.Errorf("docs/deploy.md lists an ACL kafka.ACLs does not grant:\n%s", row)
		}
	}
}
