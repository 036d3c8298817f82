package topics_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// Topic names and cleanup policies are the contract of design §4: tools and
// Java producers address them by name.
func TestSpecsPerPolicy(t *testing.T) {
	cases := []struct {
		policy    config.Policy
		ephemeral []string
		want      map[string]string // topic → cleanup.policy
	}{
		{config.PolicyLatest, nil, map[string]string{
			"s.in": "delete", "s-table": "compact", "s.state": "compact", "s.outcomes": "delete", "s.dlq": "delete",
		}},
		{config.PolicyGapless, nil, map[string]string{
			"s.in": "delete", "s-table": "compact", "s.state": "compact", "s.outcomes": "delete", "s.dlq": "delete",
			"s.replay": "delete",
		}},
		// Ephemeral event types (chat's typing) get a short-lived topic.
		{config.PolicyAssign, []string{"typing"}, map[string]string{
			"s.in": "delete", "s-table": "compact", "s.state": "compact", "s.outcomes": "delete", "s.dlq": "delete",
			"s.ephemeral": "delete",
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			s := &config.Stream{Name: "s", Policy: tc.policy, EphemeralTypes: tc.ephemeral, Limits: config.Limits{Partitions: 4}}
			specs := topics.Specs(naming.Prefixes{}, s)
			if len(specs) != len(tc.want) {
				t.Errorf("%d topics, want %d: %+v", len(specs), len(tc.want), specs)
			}
			for _, spec := range specs {
				want, ok := tc.want[spec.Name]
				if !ok {
					t.Errorf("unexpected topic %s", spec.Name)
					continue
				}
				if spec.CleanupPolicy() != want || spec.Partitions != 4 || spec.Stream != "s" {
					t.Errorf("%s: cleanup %q, %d partitions, stream %q; want %q, 4, s", spec.Name, spec.CleanupPolicy(), spec.Partitions, spec.Stream, want)
				}
				// Compacted topics keep the latest value per key forever;
				// only the others expire.
				_, hasRetention := spec.Configs["retention.ms"]
				if hasRetention != (want == "delete") {
					t.Errorf("%s: retention.ms set = %v with cleanup %s", spec.Name, hasRetention, want)
				}
			}
		})
	}
}

// Each delete-policy topic takes its retention from the stream's
// retention keys, under the topic prefix, and knows the key it came from;
// the compacted ones have none.
func TestSpecsRetentionUnderPrefix(t *testing.T) {
	s := &config.Stream{Name: "s", Policy: config.PolicyGapless, EphemeralTypes: []string{"typing"}, Limits: config.Limits{Partitions: 2},
		Retention: config.Retention{In: time.Hour, Outcomes: 2 * time.Hour, DLQ: 3 * time.Hour, Replay: 4 * time.Hour, Ephemeral: 90 * time.Second}}
	want := map[string][2]string{ // topic → retention.ms, key
		"team-a.s.in":        {"3600000", "streams.s.retention.in"},
		"team-a.s-table":     {"", ""},
		"team-a.s.state":     {"", ""},
		"team-a.s.outcomes":  {"7200000", "streams.s.retention.outcomes"},
		"team-a.s.dlq":       {"10800000", "streams.s.retention.dlq"},
		"team-a.s.replay":    {"14400000", "streams.s.retention.replay"},
		"team-a.s.ephemeral": {"90000", "streams.s.retention.ephemeral"},
	}
	specs := topics.Specs(naming.Prefixes{TopicPrefix: "team-a.", GroupPrefix: "other."}, s)
	if len(specs) != len(want) {
		t.Errorf("%d topics, want %d: %+v", len(specs), len(want), specs)
	}
	for _, spec := range specs {
		w, ok := want[spec.Name]
		if got := [2]string{spec.Retention(), spec.RetentionKey}; !ok || got != w {
			t.Errorf("%s: retention %q, want %q", spec.Name, got, w)
		}
	}
}

// ensureCases run against both the embedded broker and real Kafka: the same
// code talks to either by address.
var ensureCases = []struct {
	name string
	run  func(t *testing.T, brokers []string)
}{
	{"creates every topic with its shape, then reports them existing", testEnsureCreatesThenReportsExisting},
	{"check only reports missing topics and creates none", testEnsureCheckOnlyReportsMissing},
	{"wrong partition count is a mismatch", testEnsureRejectsWrongPartitionCount},
	{"wrong cleanup policy is a mismatch", testEnsureRejectsWrongCleanupPolicy},
	{"topic created after an earlier listing is still checked", testEnsureChecksTopicCreatedAfterListing},
	{"every created topic has the configured durability", testEnsureCreatesDurableTopics},
	{"another retention is reported with its fix, not changed, not refused", testEnsureReportsOtherRetention},
}

func TestEnsureTopics(t *testing.T) {
	for _, tc := range ensureCases {
		t.Run(tc.name, func(t *testing.T) { testenv.OnBothBrokers(t, tc.run) })
	}
}

// partitions is deliberately not the catalogue default, so a topic created
// with the default count would be caught.
const partitions = 3

// fixture is one uniquely named copy of the presence stream on a broker.
type fixture struct {
	ctx    context.Context
	cfg    *config.Config
	stream *config.Stream
	adm    *kadm.Client
	specs  map[string]topics.Spec
}

func newFixture(t *testing.T, brokers []string) *fixture {
	t.Helper()
	return newFixtureWith(t, brokers, "")
}

// newFixtureWith is newFixture with a kafka section of the config file
// (replication settings).
func newFixtureWith(t *testing.T, brokers []string, kafkaYAML string) *fixture {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	// A unique stream per test keeps its topics apart from every other test
	// on a shared broker.
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("topics")
	s.Limits.Partitions = partitions
	cfg := testenv.OnlyStream(t, s)
	if kafkaYAML != "" {
		if err := yaml.Unmarshal([]byte(kafkaYAML), &cfg.Kafka); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Kafka.Brokers = brokers
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	specs := map[string]topics.Spec{}
	for _, spec := range topics.Specs(naming.Prefixes{}, s) {
		specs[spec.Name] = spec
	}
	t.Cleanup(func() {
		// Leave the shared broker as it was.
		names := make([]string, 0, len(specs))
		for name := range specs {
			names = append(names, name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, names...)
		cl.Close()
	})
	return &fixture{ctx: ctx, cfg: cfg, stream: s, adm: adm, specs: specs}
}

func (f *fixture) names() []string {
	out := make([]string, 0, len(f.specs))
	for name := range f.specs {
		out = append(out, name)
	}
	return out
}

func (f *fixture) ensure(t *testing.T, create bool) ([]topics.Status, error) {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: f.cfg.BrokersOrDefault()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return kafka.EnsureTopics(f.ctx, cl, f.cfg, create)
}

// createTopic creates a topic behind driftguard's back, as an operator or an
// auto-creating producer would, and waits until the broker shows it: the
// topic has existed for a while when driftguard comes to check it.
func (f *fixture) createTopic(t *testing.T, name string, partitions int32, cleanup string) {
	t.Helper()
	resp, err := f.adm.CreateTopic(f.ctx, partitions, 1, map[string]*string{"cleanup.policy": &cleanup}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	f.waitForTopics(t, name)
}

// listTopics asks the broker, not the client's metadata cache: kadm answers
// ListTopics from that cache for MetadataMinAge (5s by default), and a topic
// listed as unknown stays unknown there even after it is created.
func (f *fixture) listTopics(t *testing.T, names ...string) kadm.TopicDetails {
	t.Helper()
	details, err := f.adm.ListTopics(kadm.WithAuthorizedOps(f.ctx), names...)
	if err != nil {
		t.Fatal(err)
	}
	return details
}

// waitForTopics waits until the broker's metadata lists the topics. Real
// Kafka serves metadata from a copy that trails CreateTopics by some
// milliseconds, during which a new topic is unknown.
func (f *fixture) waitForTopics(t *testing.T, names ...string) {
	t.Helper()
	var details kadm.TopicDetails
	if !testenv.Poll(f.ctx, func() bool {
		details = f.listTopics(t, names...)
		for _, name := range names {
			if d, ok := details[name]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("topics %v not in the broker's metadata: %v", names, details)
	}
}

// partitionCounts returns the partition count of every topic of the stream
// that exists.
func (f *fixture) partitionCounts(t *testing.T) map[string]int {
	t.Helper()
	details := f.listTopics(t, f.names()...)
	out := map[string]int{}
	for name, d := range details {
		if d.Err == nil {
			out[name] = len(d.Partitions)
		}
	}
	return out
}

func testEnsureCreatesThenReportsExisting(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)

	statuses, err := f.ensure(t, true)
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	checkStatuses(t, "first Ensure", statuses, f.specs, true)

	f.waitForTopics(t, f.names()...)
	counts := f.partitionCounts(t)
	for name := range f.specs {
		if counts[name] != partitions {
			t.Errorf("%s: %d partitions, want %d", name, counts[name], partitions)
		}
	}
	configs, err := f.adm.DescribeTopicConfigs(f.ctx, f.names()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range configs {
		if rc.Err != nil {
			t.Errorf("describing %s: %v", rc.Name, rc.Err)
			continue
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		// Every config driftguard asks for (cleanup.policy, retention.ms) is
		// what the broker applied.
		for key, want := range f.specs[rc.Name].Configs {
			if got[key] != want {
				t.Errorf("%s: %s=%q, want %q", rc.Name, key, got[key], want)
			}
		}
	}
	if len(configs) != len(f.specs) {
		t.Errorf("described %d topics, want %d", len(configs), len(f.specs))
	}

	statuses, err = f.ensure(t, true)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	checkStatuses(t, "second Ensure", statuses, f.specs, false)
}

// checkStatuses wants exactly one status per spec, each with created.
func checkStatuses(t *testing.T, what string, statuses []topics.Status, specs map[string]topics.Spec, created bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range statuses {
		if _, ok := specs[s.Spec.Name]; !ok || seen[s.Spec.Name] {
			t.Errorf("%s: unexpected or repeated status for %s", what, s.Spec.Name)
		}
		seen[s.Spec.Name] = true
		if s.Created != created {
			t.Errorf("%s: %s Created=%v, want %v", what, s.Spec.Name, s.Created, created)
		}
	}
	if len(seen) != len(specs) {
		t.Errorf("%s: statuses for %d topics, want %d", what, len(seen), len(specs))
	}
}

func testEnsureCheckOnlyReportsMissing(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)

	statuses, err := f.ensure(t, false)
	if err == nil {
		t.Fatalf("Ensure without create succeeded on a broker without the topics: %+v", statuses)
	}
	msg := err.Error()
	if !strings.Contains(msg, "driftguard topics") {
		t.Errorf("the error does not say how to fix it (`driftguard topics`):\n%s", msg)
	}
	for name := range f.specs {
		if !strings.Contains(msg, "topic "+name+" is missing") {
			t.Errorf("the error does not name the missing topic %s:\n%s", name, msg)
		}
	}
	if errors.Is(err, topics.ErrMismatch) || !errors.Is(err, topics.ErrMissing) {
		t.Errorf("a missing topic is ErrMissing, not a mismatch: %v", err)
	}
	if len(statuses) != 0 {
		t.Errorf("statuses for missing topics: %+v", statuses)
	}
	if counts := f.partitionCounts(t); len(counts) != 0 {
		t.Errorf("check only created topics: %v", counts)
	}
}

func testEnsureRejectsWrongPartitionCount(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)
	state := naming.Prefixes{}.For(f.stream.Name).State
	f.createTopic(t, state, 2, "compact")

	statuses, err := f.ensure(t, true)
	if !errors.Is(err, topics.ErrMismatch) {
		t.Fatalf("Ensure = %v, want an error wrapping ErrMismatch", err)
	}
	for _, want := range []string{state, "2 partitions", "streams." + f.stream.Name + ".limits.partitions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not contain %q:\n%v", want, err)
		}
	}
	// The others are still created; the wrong one is left as found, because
	// repartitioning would move keys away from their state.
	for _, s := range statuses {
		if s.Created == (s.Spec.Name == state) {
			t.Errorf("%s: Created=%v", s.Spec.Name, s.Created)
		}
	}
	f.waitForTopics(t, f.names()...)
	counts := f.partitionCounts(t)
	for name := range f.specs {
		want := partitions
		if name == state {
			want = 2
		}
		if counts[name] != want {
			t.Errorf("%s: %d partitions, want %d", name, counts[name], want)
		}
	}
}

func testEnsureRejectsWrongCleanupPolicy(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)
	names := naming.Prefixes{}.For(f.stream.Name)
	// A table that deletes old segments loses entities; an input that
	// compacts loses history.
	f.createTopic(t, names.Table, partitions, "delete")
	f.createTopic(t, names.In, partitions, "compact")

	_, err := f.ensure(t, true)
	if !errors.Is(err, topics.ErrMismatch) {
		t.Fatalf("Ensure = %v, want an error wrapping ErrMismatch", err)
	}
	for _, want := range []string{
		"topic " + names.Table + " has cleanup.policy=delete but needs compact",
		"topic " + names.In + " has cleanup.policy=compact but needs delete",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not contain %q:\n%v", want, err)
		}
	}
}

// A topic can appear between Ensure's listing and its create request: a
// processor replica starting at the same time, or a producer writing to
// `<stream>.in` on a broker that auto-creates topics with its default
// partition count. The create then answers TOPIC_ALREADY_EXISTS and the topic
// must still be checked. Here the listing is made stale on purpose: the same
// client listed the topics as missing just before they were created.
func testEnsureChecksTopicCreatedAfterListing(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopics(f.ctx, cl, f.cfg, false); err == nil {
		t.Fatal("check-only Ensure passed before any topic existed")
	}
	names := naming.Prefixes{}.For(f.stream.Name)
	f.createTopic(t, names.In, 1, "delete")

	statuses, err := kafka.EnsureTopics(f.ctx, cl, f.cfg, true)
	if !errors.Is(err, topics.ErrMismatch) || !strings.Contains(err.Error(), "topic "+names.In+" has 1 partitions") {
		t.Fatalf("Ensure = %v, want a mismatch naming %s; statuses %+v", err, names.In, statuses)
	}
}

// A delete-policy topic made behind driftguard's back with another
// retention than the catalogue's is reported (Drift) with the command that
// fixes it, and left as it is: a shorter retention would delete records.
// It is no error of Ensure, so the processors start.
func testEnsureReportsOtherRetention(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)
	dlq := naming.Prefixes{}.For(f.stream.Name).DLQ
	hour, del := "3600000", "delete"
	resp, err := f.adm.CreateTopic(f.ctx, partitions, 1, map[string]*string{"cleanup.policy": &del, "retention.ms": &hour}, dlq)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating %s: %v", dlq, err)
	}
	f.waitForTopics(t, dlq)

	statuses, err := f.ensure(t, true)
	if err != nil {
		t.Fatalf("another retention stops Ensure: %v", err)
	}
	drift := topics.Drift(statuses)
	if !errors.Is(drift, topics.ErrDrift) {
		t.Fatalf("Drift = %v, want an error wrapping ErrDrift", drift)
	}
	for _, want := range []string{
		"topic " + dlq + " has retention.ms=3600000 but streams." + f.stream.Name + ".retention.dlq is 336h (retention.ms=1209600000)",
		"--entity-name " + dlq + " --add-config retention.ms=1209600000",
	} {
		if !strings.Contains(drift.Error(), want) {
			t.Errorf("the report does not say %q:\n%v", want, drift)
		}
	}
	for _, s := range statuses {
		if s.Spec.Name != dlq && len(s.Drift) > 0 {
			t.Errorf("%s, created with the catalogue's retention, drifts: %q", s.Spec.Name, s.Drift)
		}
	}
	if c := f.describe(t, dlq)[dlq]["retention.ms"]; c.MaybeValue() != hour {
		t.Errorf("%s: retention.ms=%s after Ensure, want it left at %s", dlq, c.MaybeValue(), hour)
	}
}

// describe returns every config of each topic, by topic and key.
func (f *fixture) describe(t *testing.T, names ...string) map[string]map[string]kadm.Config {
	t.Helper()
	configs, err := f.adm.DescribeTopicConfigs(f.ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]kadm.Config{}
	for _, rc := range configs {
		if rc.Err != nil {
			t.Fatalf("describing %s: %v", rc.Name, rc.Err)
		}
		out[rc.Name] = map[string]kadm.Config{}
		for _, c := range rc.Configs {
			out[rc.Name][c.Key] = c
		}
	}
	return out
}

// On one broker: one replica and min.insync.replicas 1, set on the topic;
// on Kafka also unclean.leader.election.enable=false, set on the topic
// rather than left to the broker's default (kfake has no such setting).
func testEnsureCreatesDurableTopics(t *testing.T, brokers []string) {
	f := newFixture(t, brokers)
	statuses, err := f.ensure(t, true)
	if err != nil {
		t.Fatal(err)
	}
	if weak := topics.Weak(statuses); weak != nil {
		t.Errorf("freshly created topics are weak: %v", weak)
	}
	for _, s := range statuses {
		if s.Replicas != 1 || s.MinInsync != 1 || s.Unclean {
			t.Errorf("%s: %d replicas, min ISR %d, unclean %v; want 1, 1, false", s.Spec.Name, s.Replicas, s.MinInsync, s.Unclean)
		}
	}
	// kfake, unlike Kafka, knows no unclean.leader.election.enable.
	onKafka := slices.Equal(brokers, strings.Split(os.Getenv(testenv.EnvKafka), ","))
	checkDurableConfigs(t, f.describe(t, f.names()...), len(f.specs), "1", onKafka)
}

// checkDurableConfigs asserts that every described topic has minISR and,
// when unclean, unclean.leader.election.enable=false, each set on the
// topic itself.
func checkDurableConfigs(t *testing.T, configs map[string]map[string]kadm.Config, topicCount int, minISR string, unclean bool) {
	t.Helper()
	if len(configs) != topicCount {
		t.Errorf("described %d topics, want %d", len(configs), topicCount)
	}
	want := map[string]string{"min.insync.replicas": minISR}
	if unclean {
		want["unclean.leader.election.enable"] = "false"
	}
	for name, cs := range configs {
		for key, value := range want {
			c := cs[key]
			if c.Value == nil || *c.Value != value || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: %s=%v from %v, want %s set on the topic", name, key, c.MaybeValue(), c.Source, value)
			}
		}
	}
}

// A topic that allows unclean leader election, made behind driftguard's
// back, is reported weak with its fix, and not as an error of Ensure: the
// processors start anyway.
func TestEnsureReportsUncleanElectionAsWeak(t *testing.T) {
	f := newFixture(t, testenv.Kafka(t))
	in := naming.Prefixes{}.For(f.stream.Name).In
	yes, del := "true", "delete"
	resp, err := f.adm.CreateTopic(f.ctx, partitions, 1, map[string]*string{"cleanup.policy": &del, "unclean.leader.election.enable": &yes}, in)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	f.waitForTopics(t, in)

	statuses, err := f.ensure(t, true)
	if err != nil {
		t.Fatalf("Ensure = %v, want no error for a weak topic", err)
	}
	weak := topics.Weak(statuses)
	if !errors.Is(weak, topics.ErrWeak) {
		t.Fatalf("Weak = %v, want an error wrapping ErrWeak", weak)
	}
	for _, want := range []string{"topic " + in + " has unclean.leader.election.enable=true", "--add-config unclean.leader.election.enable=false"} {
		if !strings.Contains(weak.Error(), want) {
			t.Errorf("the error does not contain %q:\n%v", want, weak)
		}
	}
	for _, s := range statuses {
		if (len(s.Weak) > 0) != (s.Spec.Name == in) {
			t.Errorf("%s: weak %q", s.Spec.Name, s.Weak)
		}
	}
}
