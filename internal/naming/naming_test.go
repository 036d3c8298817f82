package naming_test

import (
	"slices"
	"testing"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/naming"
)

// Without prefixes, the names of design §4, which tools and Java producers
// address; with them, every name starts with its prefix.
func TestNames(t *testing.T) {
	cases := []struct {
		prefixes naming.Prefixes
		topics   []string
		group    string
		txn      string
	}{
		{naming.Prefixes{},
			[]string{"presence.in", "presence-table", "presence.state", "presence.outcomes", "presence.dlq", "presence.replay", "presence.ephemeral"},
			"presence", "driftguard-presence-pod-0"},
		{naming.Prefixes{TopicPrefix: "team-a.", GroupPrefix: "team-a."},
			[]string{"team-a.presence.in", "team-a.presence-table", "team-a.presence.state", "team-a.presence.outcomes", "team-a.presence.dlq", "team-a.presence.replay", "team-a.presence.ephemeral"},
			"team-a.presence", "team-a.driftguard-presence-pod-0"},
		// The table follows the topic prefix, not the group's.
		{naming.Prefixes{TopicPrefix: "t-", GroupPrefix: "g-"},
			[]string{"t-presence.in", "t-presence-table", "t-presence.state", "t-presence.outcomes", "t-presence.dlq", "t-presence.replay", "t-presence.ephemeral"},
			"g-presence", "g-driftguard-presence-pod-0"},
	}
	for _, tc := range cases {
		if got := tc.prefixes.For("presence").All(); !slices.Equal(got, tc.topics) {
			t.Errorf("%+v: topics %q, want %q", tc.prefixes, got, tc.topics)
		}
		if got := tc.prefixes.Group("presence"); got != tc.group {
			t.Errorf("%+v: group %q, want %q", tc.prefixes, got, tc.group)
		}
		if got := tc.prefixes.TransactionalID("pod-0", "presence"); got != tc.txn {
			t.Errorf("%+v: transactional id %q, want %q", tc.prefixes, got, tc.txn)
		}
		if got, want := tc.prefixes.ConsumerGroup("sink"), tc.prefixes.GroupPrefix+"sink"; got != want {
			t.Errorf("%+v: consumer group %q, want %q", tc.prefixes, got, want)
		}
	}
}

// With equal prefixes (and none), the table is the one goka names after
// the group, so goka's own tools find it under their default name.
func TestTableIsGokaGroupTableWithEqualPrefixes(t *testing.T) {
	for _, p := range []naming.Prefixes{{}, {TopicPrefix: "team-a.", GroupPrefix: "team-a."}} {
		if got, want := p.For("presence").Table, string(goka.GroupTable(goka.Group(p.Group("presence")))); got != want {
			t.Errorf("%+v: table %q, want goka's %q", p, got, want)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"", "team-a.", "Team_A-1."} {
		if err := naming.CheckPrefix(ok); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"team a", "team/a", "team:a", "tëam"} {
		if err := naming.CheckPrefix(bad); err == nil {
			t.Errorf("CheckPrefix(%q) accepted it", bad)
		}
	}
}

// A new generation re-decides the same input: every name but the input
// topic's changes, the group table still being goka's, and other streams
// keep their names.
func TestGenerationRenamesAllButTheInput(t *testing.T) {
	for _, p := range []naming.Prefixes{
		{Generations: map[string]int{"presence": 2, "chat": 1}},
		{TopicPrefix: "team-a.", GroupPrefix: "team-a.", Generations: map[string]int{"presence": 2, "chat": 1}},
	} {
		old := naming.Prefixes{TopicPrefix: p.TopicPrefix, GroupPrefix: p.GroupPrefix}
		got, was := p.For("presence"), old.For("presence")
		if got.In != was.In {
			t.Errorf("%+v: input %q, want the unchanged %q", p, got.In, was.In)
		}
		want := []string{p.TopicPrefix + "presence.g2-table", p.TopicPrefix + "presence.g2.state", p.TopicPrefix + "presence.g2.outcomes",
			p.TopicPrefix + "presence.g2.dlq", p.TopicPrefix + "presence.g2.replay", p.TopicPrefix + "presence.g2.ephemeral"}
		if !slices.Equal(got.All()[1:], want) {
			t.Errorf("%+v: topics %q, want %q", p, got.All()[1:], want)
		}
		if g := p.Group("presence"); g != p.GroupPrefix+"presence.g2" || got.Table != string(goka.GroupTable(goka.Group(g))) {
			t.Errorf("%+v: group %q with table %q, want presence.g2 and its goka table", p, g, got.Table)
		}
		if id, was := p.TransactionalID("pod-0", "presence"), old.TransactionalID("pod-0", "presence"); id == was {
			t.Errorf("%+v: transactional id %q unchanged: the new generation's processors would fence the old ones", p, id)
		}
		// Generation 1 is the original names.
		if !slices.Equal(p.For("chat").All(), old.For("chat").All()) || p.Group("chat") != old.Group("chat") {
			t.Errorf("%+v: generation 1 renamed chat", p)
		}
	}
}
