package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The prefixes come from the file, the environment wins over it, and every
// name is built from them.
func TestLoadPrefixes(t *testing.T) {
	path := testenv.WriteConfig(t, "", "kafka: {topic_prefix: file., group_prefix: file.}\n")
	fromFile := mustLoad(t, path, nil)
	fromEnv := mustLoad(t, path, []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=team-a.", "DRIFTGUARD_KAFKA_GROUP_PREFIX=team-a-groups."})
	n := fromEnv.Kafka.Naming()
	checkFields(t, []field{
		{"topic prefix from the file", fromFile.Kafka.TopicPrefix, "file."},
		{"group prefix from the file", fromFile.Kafka.GroupPrefix, "file."},
		{"input topic", n.For("presence").In, "team-a.presence.in"},
		{"table topic", n.For("presence").Table, "team-a.presence-table"},
		{"processor group", n.Group("presence"), "team-a-groups.presence"},
		{"sink group", n.ConsumerGroup(fromEnv.ClickHouse.ConsumerGroup), "team-a-groups.driftguard-sink-clickhouse"},
		{"transactional id", n.TransactionalID("pod-0", "presence"), "team-a-groups.driftguard-presence-pod-0"},
	})
	if len(fromEnv.Warnings) != 0 {
		t.Errorf("warnings %q, want none", fromEnv.Warnings)
	}
}

// A prefix Kafka would refuse in a name is refused at load, naming its
// path. The shipped catalogue's longest stream names are 8 characters and
// its longest topic suffix `.ephemeral` 10, so a 231-character topic
// prefix makes 249-character topics, Kafka's most, and one more is
// refused.
func TestLoadRejectsPrefixesKafkaWouldRefuse(t *testing.T) {
	if _, err := config.Load("", []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=" + strings.Repeat("t", 231)}); err != nil {
		t.Errorf("a prefix making 249-character topics is refused: %v", err)
	}
	cases := []struct {
		name    string
		environ []string
		want    []string
	}{
		{"space in the topic prefix", []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=team a."}, []string{"in kafka.topic_prefix:", `' '`}},
		{"slash in the group prefix", []string{"DRIFTGUARD_KAFKA_GROUP_PREFIX=team/a"}, []string{"in kafka.group_prefix:", `'/'`}},
		{"topics over 249 characters", []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=" + strings.Repeat("t", 232)},
			[]string{"in kafka.topic_prefix:", ".ephemeral, 250 characters long", "at most 249"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load("", tc.environ)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

// Kafka's metric names read '.' and '_' alike: a topic prefix with an '_'
// is warned of, one with '.' or '-' is not.
func TestLoadWarnsOfUnderscoreInTopicPrefix(t *testing.T) {
	cfg := mustLoad(t, "", []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=team_a."})
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "kafka.topic_prefix") || !strings.Contains(cfg.Warnings[0], "team.a.presence.in") {
		t.Errorf("warnings %q, want one naming kafka.topic_prefix and the topic it collides with", cfg.Warnings)
	}
	if cfg := mustLoad(t, "", []string{"DRIFTGUARD_KAFKA_TOPIC_PREFIX=team-a.x."}); len(cfg.Warnings) != 0 {
		t.Errorf("warnings %q, want none", cfg.Warnings)
	}
}

// Every stream's retentions default to what the topics always had, each
// may be set on its own, and each must be at least a second.
func TestLoadRetention(t *testing.T) {
	defaults := mustLoad(t, "", nil)
	for _, name := range defaults.StreamNames() {
		r := defaults.Streams[name].Retention
		checkFields(t, []field{{name + " retention", r, config.Retention{
			In: 168 * time.Hour, Outcomes: 168 * time.Hour, DLQ: 336 * time.Hour, Replay: 168 * time.Hour, Ephemeral: 10 * time.Minute}}})
	}
	set := mustLoad(t, testenv.WriteConfig(t, "", "streams: {presence: {retention: {in: 72h, ephemeral: 1m}}}"), nil)
	checkFields(t, []field{{"presence retention", set.Streams["presence"].Retention, config.Retention{
		In: 72 * time.Hour, Outcomes: 168 * time.Hour, DLQ: 336 * time.Hour, Replay: 168 * time.Hour, Ephemeral: time.Minute}}})

	_, err := config.Load(testenv.WriteConfig(t, "", "streams: {presence: {retention: {dlq: -1h, outcomes: 500ms}}}"), nil)
	for _, want := range []string{"in streams.presence.retention.dlq: must be at least 1s, got -1h0m0s", "in streams.presence.retention.outcomes: must be at least 1s, got 500ms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}
