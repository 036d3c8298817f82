package config_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"pgregory.net/rapid"
)

// Secrets of the right shape: "whsec_" plus base64 of 32 and 16 bytes.
var (
	validSecret      = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	otherValidSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
	shortSecret      = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
)

// field is one observed value and the value it should have.
type field struct {
	name      string
	got, want any
}

func checkFields(t *testing.T, fields []field) {
	t.Helper()
	for _, f := range fields {
		if fmt.Sprint(f.got) != fmt.Sprint(f.want) {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
}

func mustLoad(t *testing.T, path string, environ []string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path, environ)
	if err != nil {
		t.Fatalf("Load(%q): %v", path, err)
	}
	return cfg
}

func TestLoadWithoutFileGivesWorkingDefaults(t *testing.T) {
	// The data dir default follows XDG_STATE_HOME; pin it so the expected
	// value does not depend on the machine.
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)

	cfg := mustLoad(t, "", nil)

	presence := cfg.Streams["presence"]
	if presence == nil {
		t.Fatalf("the embedded catalogue has no presence stream; streams: %v", cfg.StreamNames())
	}
	checkFields(t, []field{
		{"Kafka.Brokers (empty: dev reads it as the embedded broker)", len(cfg.Kafka.Brokers), 0},
		{"BrokersOrDefault()", cfg.BrokersOrDefault(), []string{"127.0.0.1:9092"}},
		{"Kafka.ReplicationFactor", cfg.Kafka.ReplicationFactor, 1},
		{"Kafka.MinInsyncReplicasOrDefault()", cfg.Kafka.MinInsyncReplicasOrDefault(), 1},
		{"Kafka.ProduceTimeout", cfg.Kafka.ProduceTimeout, 5 * time.Second},
		{"HTTP.Addr", cfg.HTTP.Addr, "127.0.0.1:8080"},
		{"HTTP.MaxInFlightBytes (64 bodies at 256 KiB)", cfg.HTTP.MaxInFlightBytes, int64(16 << 20)},
		{"HTTP.MaxPerSource (off)", cfg.HTTP.MaxPerSource, 0},
		{"HTTP.TrustedProxies", len(cfg.HTTP.TrustedProxies), 0},
		{"HTTP.ReadTimeout", cfg.HTTP.ReadTimeout, 30 * time.Second},
		{"HTTP.MaxInFlightBytesPerSource (a quarter of the budget)", cfg.HTTP.MaxInFlightBytesPerSource, int64(4 << 20)},
		{"HTTP.MinBodyRate", cfg.HTTP.MinBodyRate, int64(4 << 10)},
		{"HTTP.MaxConnections", cfg.HTTP.MaxConnections, 1024},
		{"HTTP.MaxConnectionsPerSource", cfg.HTTP.MaxConnectionsPerSource, 128},
		{"HTTP.IdleTimeout", cfg.HTTP.IdleTimeout, 5 * time.Second},
		{"ClickHouse.Addr", cfg.ClickHouse.Addr, "127.0.0.1:9000"},
		{"ClickHouse.Database", cfg.ClickHouse.Database, "driftguard"},
		{"ClickHouse.Username", cfg.ClickHouse.Username, "default"},
		{"ClickHouse.BatchRows", cfg.ClickHouse.BatchRows, 50_000},
		{"ClickHouse.BatchBytes", cfg.ClickHouse.BatchBytes, 16 << 20},
		{"ClickHouse.BatchPeriod", cfg.ClickHouse.BatchPeriod, time.Second},
		{"ClickHouse.ConsumerGroup", cfg.ClickHouse.ConsumerGroup, "driftguard-sink-clickhouse"},
		{"ClickHouse.SessionTimeout", cfg.ClickHouse.SessionTimeout, 45 * time.Second},
		{"Telemetry.Addr", cfg.Telemetry.Addr, "127.0.0.1:9464"},
		{"Telemetry.LogLevel", cfg.Telemetry.LogLevel, "info"},
		{"DataDir", cfg.DataDir, filepath.Join(state, "driftguard")},
		{"Warnings", len(cfg.Warnings), 0},
		{"presence.Name", presence.Name, "presence"},
		{"presence.Policy", presence.Policy, config.PolicyLatest},
		{"presence.Key", presence.Key, "/user_id"},
		{"presence.EventID", presence.EventID, "/event_id"},
		{"presence.Version", presence.Version, "/sequence_number"},
		{"presence.OccurredAt", presence.OccurredAt, "/timestamp"},
		{"presence.OccurredAtUnit", presence.OccurredAtUnit, "s"},
		{"presence.Type.Fixed", presence.Type.Fixed, "presence.changed"},
		{"presence.Signature.Scheme", presence.Signature.Scheme, config.SchemeStandardWebhooks},
		{"presence.Signature.Tolerance", presence.Signature.Tolerance, 300 * time.Second},
		{"presence.Signature.Secrets", len(presence.Signature.Secrets), 0},
		{"presence.Limits.Partitions", presence.Limits.Partitions, 6},
		{"presence.Limits.MaxBodyBytes", presence.Limits.MaxBodyBytes, 256 << 10},
		{"presence.Limits.DedupIDs", presence.Limits.DedupIDs, 256},
		{"presence.Limits.DedupWindow", presence.Limits.DedupWindow, 7 * 24 * time.Hour},
		{"presence.DedupRows()", presence.DedupRows(), 17},
		{"orders.DedupRows()", cfg.Streams["orders"].DedupRows(), 1},
	})
	schema, err := presence.SchemaBytes("presence.changed")
	if err != nil || !strings.Contains(string(schema), `"sequence_number"`) {
		t.Errorf("presence schema from the embedded files: %v\n%s", err, schema)
	}
}

// Default is what Load starts from, so with no file and no environment the
// two agree, and Default on its own already validates.
func TestDefaultValidatesAndMatchesLoad(t *testing.T) {
	def, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	if err := def.Validate(); err != nil {
		t.Fatalf("Default().Validate(): %v", err)
	}
	loaded := mustLoad(t, "", nil)
	if got, want := fmt.Sprintf("%+v", *loaded.Streams["presence"]), fmt.Sprintf("%+v", *def.Streams["presence"]); got != want {
		t.Errorf("presence from Load:\n%s\nfrom Default:\n%s", got, want)
	}
}

func TestLoadFileMergesStreamEntriesFieldByField(t *testing.T) {
	path := testenv.WriteConfig(t, "", `
kafka:
  brokers: [kafka-1:9092, kafka-2:9092]
streams:
  presence:
    limits:
      partitions: 12
    signature:
      tolerance: 60s
`)
	cfg := mustLoad(t, path, nil)
	presence := cfg.Streams["presence"]
	checkFields(t, []field{
		// What the file says.
		{"BrokersOrDefault()", cfg.BrokersOrDefault(), []string{"kafka-1:9092", "kafka-2:9092"}},
		{"presence.Limits.Partitions", presence.Limits.Partitions, 12},
		{"presence.Signature.Tolerance", presence.Signature.Tolerance, time.Minute},
		// What the file leaves alone, down to siblings inside the same
		// nested blocks (limits, signature).
		{"presence.Limits.DedupIDs", presence.Limits.DedupIDs, 256},
		{"presence.Limits.MaxBodyBytes", presence.Limits.MaxBodyBytes, 262144},
		{"presence.Signature.Scheme", presence.Signature.Scheme, config.SchemeStandardWebhooks},
		{"presence.Policy", presence.Policy, config.PolicyLatest},
		{"presence.Key", presence.Key, "/user_id"},
		{"presence.Version", presence.Version, "/sequence_number"},
		{"presence.Type.Fixed", presence.Type.Fixed, "presence.changed"},
		{"presence.Schemas", presence.Schemas, map[string]string{"presence.changed": "streams/presence.schema.json"}},
		{"streams", cfg.StreamNames(), []string{"chat", "orders", "presence", "workflow"}},
		{"Warnings", cfg.Warnings, []string(nil)},
	})
	// The entry now belongs to the file's folder, which has no copy of the
	// shipped schema: it must still come from the embedded files.
	if _, err := presence.SchemaBytes("presence.changed"); err != nil {
		t.Errorf("presence schema after an override: %v", err)
	}
}

// A body-HMAC stream's replay window is off unless it names the body's
// time; named, it takes signature.tolerance, which may be half the dedup
// memory's window and no more.
func TestLoadBodyReplayWindow(t *testing.T) {
	if def := mustLoad(t, "", nil); def.Streams["presence"].Signature.Timestamp != "" {
		t.Fatalf("a replay window on by default: %q", def.Streams["presence"].Signature.Timestamp)
	}
	cfg := mustLoad(t, testenv.WriteConfig(t, "", `
streams:
  presence:
    signature: {scheme: github, timestamp: /timestamp, tolerance: 1h}
    limits: {dedup_window: 2h}
`), nil)
	presence := cfg.Streams["presence"]
	checkFields(t, []field{
		{"presence.Signature.Scheme", presence.Signature.Scheme, config.SchemeGitHub},
		{"presence.Signature.Timestamp", presence.Signature.Timestamp, "/timestamp"},
		{"presence.Signature.Tolerance", presence.Signature.Tolerance, time.Hour},
		{"Warnings", cfg.Warnings, []string(nil)},
	})
}

// The example of a new stream in docs/catalogue.md: an entry plus a schema
// next to the config file, no Go code.
func TestLoadFileAddsStreamWithSchemaNextToConfigFile(t *testing.T) {
	dir := t.TempDir()
	schema := `{"type": "object", "required": ["agent_id", "id", "revision"]}`
	testenv.WriteFile(t, dir, "etc/schemas/availability.schema.json", schema)
	path := testenv.WriteFile(t, dir, "etc/driftguard.yaml", `
streams:
  availability:
    policy: latest
    key: /agent_id
    event_id: /id
    type: {fixed: availability.changed}
    version: /revision
    schemas: {availability.changed: schemas/availability.schema.json}
`)
	// The test's working directory is the package folder, so a schema path
	// resolved against it instead of the config's folder would not be found.
	cfg := mustLoad(t, path, nil)

	if got, want := cfg.StreamNames(), []string{"availability", "chat", "orders", "presence", "workflow"}; !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
	s := cfg.Streams["availability"]
	checkFields(t, []field{
		{"availability.Name", s.Name, "availability"},
		{"availability.Key", s.Key, "/agent_id"},
		// Fields the entry leaves out get the stream defaults.
		{"availability.Limits.Partitions", s.Limits.Partitions, 6},
		{"availability.Signature.Scheme", s.Signature.Scheme, config.SchemeStandardWebhooks},
		{"availability.OccurredAtUnit", s.OccurredAtUnit, "s"},
	})
	got, err := s.SchemaBytes("availability.changed")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != schema {
		t.Errorf("schema %s, want the file next to the config: %s", got, schema)
	}
}

func TestLoadRejectsInvalidFileNamingTheConfigPath(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "partitions below one",
			yaml: "streams: {presence: {limits: {partitions: -1}}}",
			want: []string{"in streams.presence.limits.partitions:", "got -1"},
		},
		{
			name: "partitions above the limit",
			yaml: "streams: {presence: {limits: {partitions: 10001}}}",
			want: []string{"in streams.presence.limits.partitions:", "got 10001"},
		},
		{
			// Kafka's default max.message.bytes (1048588) less the batch
			// and record framing, the headers and 4 KiB for the key, id
			// and type.
			name: "body limit over what a Kafka record of the stream carries",
			yaml: "streams: {presence: {limits: {max_body_bytes: 1048576}}}",
			want: []string{"in streams.presence.limits.max_body_bytes: 1048576 is over 1044319", "input topic", "max.message.bytes (1048588)"},
		},
		{
			name: "in-flight budget under one body at the limit for large bodies",
			yaml: "http: {max_in_flight_bytes: 300000}",
			want: []string{"in http.max_in_flight_bytes:", "limits.max_body_bytes (262144)", "at least 349528"},
		},
		{
			name: "a source's share under one body at the limit",
			yaml: "http: {max_in_flight_bytes_per_source: 100000}",
			want: []string{"in http.max_in_flight_bytes_per_source:", "largest limits.max_body_bytes (262144)", "got 100000"},
		},
		{
			name: "a source's share over the budget",
			yaml: "http: {max_in_flight_bytes_per_source: 20000000}",
			want: []string{"in http.max_in_flight_bytes_per_source:", "http.max_in_flight_bytes (16777216)", "got 20000000"},
		},
		{
			name: "connections per source over the cap",
			yaml: "http: {max_connections: 64, max_connections_per_source: 65}",
			want: []string{"in http.max_connections_per_source:", "from 1 to http.max_connections (64)", "got 65"},
		},
		{
			name: "idle timeout under a second",
			yaml: "http: {idle_timeout: 500ms}",
			want: []string{"in http.idle_timeout:", "at least 1s"},
		},
		{
			name: "negative minimum body rate",
			yaml: "http: {min_body_rate: -1}",
			want: []string{"in http.min_body_rate:", "got -1"},
		},
		{
			name: "generation of a stream not in the catalogue",
			yaml: "kafka: {generations: {presense: 2}}",
			want: []string{"in kafka.generations.presense:", "not a stream of the catalogue"},
		},
		{
			name: "generation below one",
			yaml: "kafka: {generations: {presence: 0}}",
			want: []string{"in kafka.generations.presence:", "got 0"},
		},
		{
			// A mistyped unit (1m for a month) would empty the table.
			name: "table retention under an hour",
			yaml: "clickhouse: {retention: {events: 1m}}",
			want: []string{"in clickhouse.retention.events:", "at least 1h", "got 1m0s"},
		},
		{
			name: "retention period under a minute",
			yaml: "clickhouse: {retention: {events: 720h, every: 10s}}",
			want: []string{"in clickhouse.retention.every:", "got 10s"},
		},
		{
			name: "per-source limit below zero",
			yaml: "http: {max_per_source: -1}",
			want: []string{"in http.max_per_source:", "got -1"},
		},
		{
			name: "trusted proxy that is no address",
			yaml: "http: {trusted_proxies: [10.0.0.0/8, proxy.internal]}",
			want: []string{"in http.trusted_proxies[1]:", `"proxy.internal"`},
		},
		{
			name: "read timeout under a second",
			yaml: "http: {read_timeout: 100ms}",
			want: []string{"in http.read_timeout:", "got 100ms"},
		},
		{
			name: "replication factor below one",
			yaml: "kafka: {replication_factor: -1}",
			want: []string{"in kafka.replication_factor:"},
		},
		{
			name: "min ISR above the replication factor",
			yaml: "kafka: {replication_factor: 3, min_insync_replicas: 4}",
			want: []string{"in kafka.min_insync_replicas:", "between 1 and kafka.replication_factor (3), got 4"},
		},
		{
			name: "min ISR below one",
			yaml: "kafka: {min_insync_replicas: -1}",
			want: []string{"in kafka.min_insync_replicas:", "got -1"},
		},
		{
			name: "broker without a port",
			yaml: "kafka: {brokers: [127.0.0.1:9092, localhost]}",
			want: []string{"in kafka.brokers[1]:", `"localhost"`},
		},
		{
			name: "unknown policy",
			yaml: "streams: {presence: {policy: newest}}",
			want: []string{"in streams.presence.policy:", `unknown policy "newest"`},
		},
		{
			name: "key pointer without leading slash",
			yaml: "streams: {presence: {key: user_id}}",
			want: []string{"in streams.presence.key:", "must start with /"},
		},
		{
			name: "version pointer without leading slash",
			yaml: "streams: {presence: {version: sequence_number}}",
			want: []string{"in streams.presence.version:"},
		},
		{
			name: "secret without whsec_ prefix",
			yaml: "streams: {presence: {signature: {secrets: [" + validSecret + ", not-a-whsec-secret]}}}",
			want: []string{"in streams.presence.signature.secrets[1]:", "whsec_"},
		},
		{
			name: "secret that is not base64",
			yaml: "streams: {presence: {signature: {secrets: [whsec_***]}}}",
			want: []string{"in streams.presence.signature.secrets[0]:", "not base64"},
		},
		{
			name: "secret shorter than the minimum",
			yaml: "streams: {presence: {signature: {secrets: [" + shortSecret + "]}}}",
			want: []string{"in streams.presence.signature.secrets[0]:", "16 bytes", fmt.Sprint(config.MinSecretBytes)},
		},
		{
			name: "empty secret",
			yaml: `streams: {presence: {signature: {secrets: [""]}}}`,
			want: []string{"in streams.presence.signature.secrets[0]:"},
		},
		{
			name: "unknown signature scheme",
			yaml: "streams: {presence: {signature: {scheme: rot13}}}",
			want: []string{"in streams.presence.signature.scheme:", `"rot13"`},
		},
		{
			name: "type both fixed and from a field",
			yaml: "streams: {presence: {type: {field: /type}}}",
			want: []string{"in streams.presence.type:", "exactly one"},
		},
		{
			name: "occurred_at unit other than s or ms",
			yaml: "streams: {presence: {occurred_at_unit: us}}",
			want: []string{"in streams.presence.occurred_at_unit:"},
		},
		{
			name: "a body and a buffer that together outgrow a table value",
			yaml: "streams: {workflow: {limits: {max_body_bytes: 262144, buffer_bytes: 786432}}}",
			want: []string{"in streams.workflow.limits.max_body_bytes:", "limits.buffer_bytes (786432", "over its budget of 983040"},
		},
		{
			name: "dedup memory above the limit",
			yaml: "streams: {orders: {limits: {dedup_ids: 10083}}}",
			want: []string{"in streams.orders.limits.dedup_ids:", "between 1 and 10082", "got 10083"},
		},
		{
			name: "dedup memory of every device row above the limit",
			yaml: "streams: {presence: {limits: {dedup_ids: 594}}}",
			want: []string{"in streams.presence.limits.dedup_ids:", "between 1 and 593 with 17 dedup rows", "got 594"},
		},
		{
			name: "negative dedup memory",
			yaml: "streams: {orders: {limits: {dedup_ids: -1}}}",
			want: []string{"in streams.orders.limits.dedup_ids:", "got -1"},
		},
		{
			name: "dedup window below a second",
			yaml: "streams: {orders: {limits: {dedup_window: 500ms}}}",
			want: []string{"in streams.orders.limits.dedup_window:", "got 500ms"},
		},
		{
			name: "negative dedup window",
			yaml: "streams: {orders: {limits: {dedup_window: -1h}}}",
			want: []string{"in streams.orders.limits.dedup_window:", "got -1h0m0s"},
		},
		{
			name: "dedup window above the limit",
			yaml: "streams: {orders: {limits: {dedup_window: 721h}}}",
			want: []string{"in streams.orders.limits.dedup_window:", "between 1s and 720h0m0s", "got 721h0m0s"},
		},
		{
			name: "device rows on a gapless stream",
			yaml: "streams: {workflow: {devices: {field: /device_id, derive: status}}}",
			want: []string{"in streams.workflow.devices:", "latest policy"},
		},
		{
			name: "device rows without the derived field",
			yaml: "streams: {presence: {devices: {derive: \"\"}}}",
			want: []string{"in streams.presence.devices.derive:"},
		},
		{
			name: "device rows above the limit",
			yaml: "streams: {presence: {limits: {devices: 1001}}}",
			want: []string{"in streams.presence.limits.devices:"},
		},
		{
			name: "database name that is not an identifier",
			yaml: "clickhouse: {database: drift-guard}",
			want: []string{"in clickhouse.database:"},
		},
		{
			name: "batch larger than ClickHouse's max_insert_block_size",
			yaml: "clickhouse: {batch_rows: 1048577}",
			want: []string{"in clickhouse.batch_rows:"},
		},
		{
			name: "batch bytes too small",
			yaml: "clickhouse: {batch_bytes: 10}",
			want: []string{"in clickhouse.batch_bytes:"},
		},
		{
			name: "unknown log level",
			yaml: "telemetry: {log_level: verbose}",
			want: []string{"in telemetry.log_level:"},
		},
		{
			name: "pyroscope password without a user",
			yaml: "telemetry: {pyroscope_basic_auth_password: token}",
			want: []string{"in telemetry.pyroscope_basic_auth_user:", "is required with telemetry.pyroscope_basic_auth_password"},
		},
		{
			name: "stream name that cannot name a topic",
			yaml: "streams: {Bad-Name: {policy: latest, key: /id, type: {fixed: t}, schemas: {t: streams/presence.schema.json}}}",
			want: []string{"in streams.Bad-Name:", "stream name"},
		},
		{
			name: "new stream without policy, key and schemas",
			yaml: "streams: {bare: {type: {fixed: t}}}",
			want: []string{"in streams.bare.policy: missing", "in streams.bare.key: missing", "in streams.bare.schemas:"},
		},
		{
			name: "schema file that does not exist",
			yaml: "streams: {presence: {schemas: {presence.changed: nowhere.json}}}",
			want: []string{"in streams.presence.schemas.presence.changed:", "nowhere.json"},
		},
		{
			name: "terminal states on a stream with device rows",
			yaml: "streams: {presence: {terminal: {field: /presence, values: [GONE]}}}",
			want: []string{"in streams.presence.terminal:", "drop devices or terminal"},
		},
		{
			name: "terminal values without the field",
			yaml: "streams: {orders: {terminal: {values: [order.cancelled]}}}",
			want: []string{"in streams.orders.terminal.field: missing JSON pointer"},
		},
		{
			name: "assign section on a latest stream",
			yaml: "streams: {orders: {assign: {message_id: \"{key}-{seq}\"}}}",
			want: []string{"in streams.orders.assign: only the assign policy reads it, not latest"},
		},
		{
			name: "assign stream without sends, members or pointers",
			yaml: "streams: {chat: {assign: {send: {types: [], sender: \"\"}, members: {added: [], user: \"\"}}}}",
			want: []string{"in streams.chat.assign.send.types:", "in streams.chat.assign.members.added:",
				"in streams.chat.assign.send.sender: missing JSON pointer", "in streams.chat.assign.members.user: missing JSON pointer",
				`in streams.chat.schemas.message.send: the assign policy has no part for event type "message.send"`},
		},
		{
			name: "assign type with two parts",
			yaml: "streams: {chat: {assign: {receipts: {read: [receipt.read, member.added]}}}}",
			want: []string{"in streams.chat.assign.receipts.read[1]:", `"member.added" already plays a part under assign.members.added`},
		},
		{
			name: "assign part naming a type without a schema",
			yaml: "streams: {chat: {assign: {members: {removed: [member.left]}}}}",
			want: []string{"in streams.chat.assign.members.removed[0]:", `event type "member.left" has no schema`,
				`in streams.chat.schemas.member.removed: the assign policy has no part for event type "member.removed"`},
		},
		{
			name: "message id without the sequence",
			yaml: "streams: {chat: {assign: {message_id: \"{key}\"}}}",
			want: []string{"in streams.chat.assign.message_id:", "must contain {seq}"},
		},
		{
			name: "message id with an unknown placeholder",
			yaml: "streams: {chat: {assign: {message_id: \"{stream}/{seq}\"}}}",
			want: []string{"in streams.chat.assign.message_id:", "may name only {key} and {seq}"},
		},
		{
			name: "chat history below zero",
			yaml: "bridge: {chat_history: -1h}",
			want: []string{"in bridge.chat_history:", "must be 0 (read the outcomes from their log start) or positive, got -1h0m0s"},
		},
		{
			name: "compression not a codec",
			yaml: "kafka: {compression: brotli}",
			want: []string{`in kafka.compression: must be one of none, snappy, lz4, zstd, gzip, got "brotli"`},
		},
		{
			name: "typing outside the bounds",
			yaml: "bridge: {typing_ttl: 2m, typing_rate: -1}",
			want: []string{"in bridge.typing_ttl: must be from 100ms to 1m", "got 2m0s",
				"in bridge.typing_rate: must be above 0 and at most 100", "got -1"},
		},
		{
			name: "typing of a type that is not ephemeral, and without its user",
			yaml: "streams: {chat: {assign: {typing: {type: message.send, user: \"\"}}}}",
			want: []string{`in streams.chat.assign.typing.type: event type "message.send" must be one of ephemeral_types`,
				"in streams.chat.assign.typing.user: missing JSON pointer"},
		},
		{
			name: "typing user without its type",
			yaml: "streams: {chat: {assign: {typing: {type: \"\", user: /user_id}}}}",
			want: []string{"in streams.chat.assign.typing.type: is required with assign.typing.user"},
		},
		{
			name: "send wait out of range, send rates negative",
			yaml: "bridge: {send_wait: 10ms, send_rate: {per_user: {rate: -1}, per_conversation: {rate: 5, burst: -2}}}",
			want: []string{"in bridge.send_wait: must be between 100ms and 1m, got 10ms", "in bridge.send_rate.per_user.rate: must be 0 (off)",
				"in bridge.send_rate.per_conversation.burst: must be at least 1, got -2"},
		},
		{
			name: "receipts without their pointers",
			yaml: "streams: {chat: {assign: {receipts: {user: \"\", sequence: \"\"}}}}",
			want: []string{"in streams.chat.assign.receipts.user: missing JSON pointer", "in streams.chat.assign.receipts.sequence: missing JSON pointer"},
		},
		{
			// standard-webhooks' signed time is its header's.
			name: "body timestamp on a standard-webhooks stream",
			yaml: "streams: {presence: {signature: {timestamp: /timestamp}}}",
			want: []string{"in streams.presence.signature.timestamp: standard-webhooks signs webhook-timestamp"},
		},
		{
			name: "body timestamp that is no JSON pointer",
			yaml: "streams: {presence: {signature: {scheme: github, timestamp: timestamp}}}",
			want: []string{`in streams.presence.signature.timestamp: "timestamp" is not a JSON pointer`},
		},
		{
			// A body dated 1h ahead is replayable for 2h after it was
			// first accepted; the ids are remembered for 1h59m.
			name: "replay window longer than the dedup memory",
			yaml: "streams: {presence: {signature: {scheme: hmac-sha256-hex, timestamp: /timestamp, tolerance: 1h}, limits: {dedup_window: 119m}}}",
			want: []string{"in streams.presence.signature.tolerance: 1h0m0s, twice over", "longer than limits.dedup_window (1h59m0s)"},
		},
		{
			name: "unknown history policy, device pointer and bound",
			yaml: "streams: {chat: {assign: {history: world, receipts: {device: device_id}}, limits: {devices: 1001}}}",
			want: []string{"in streams.chat.assign.history: must be joined", `got "world"`, "in streams.chat.assign.receipts.device:",
				"in streams.chat.limits.devices: the devices a member's delivery is recorded for must be between 1 and 1000, got 1001"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(testenv.WriteConfig(t, "", tc.yaml), nil)
			if err == nil {
				t.Fatalf("Load accepted the file; config %+v", cfg)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

// An operator fixing a file one error per run would need as many runs as
// errors; Validate reports them all in one go.
func TestValidateReportsEveryErrorAtOnce(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	presence := cfg.Streams["presence"]
	cfg.Kafka.ReplicationFactor = 0
	presence.Policy = "newest"
	presence.Key = "user_id"
	presence.Limits.Partitions = 0
	presence.Signature.Secrets = []string{"bad", shortSecret}

	err = cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted the config")
	}
	wantPaths := []string{
		"in kafka.replication_factor:",
		"in streams.presence.policy:",
		"in streams.presence.key:",
		"in streams.presence.limits.partitions:",
		"in streams.presence.signature.secrets[0]:",
		"in streams.presence.signature.secrets[1]:",
	}
	for _, want := range wantPaths {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q", want)
		}
	}
	// One error per problem, so callers can list them.
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(wantPaths) {
		t.Errorf("want %d separate errors, got:\n%v", len(wantPaths), err)
	}
}

func TestValidateRejectsEmptyCatalogue(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Streams = nil
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "in streams:") {
		t.Errorf("Validate() = %v, want an error in streams", err)
	}
}

func TestLoadReportsUnknownKeysAsWarnings(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want string // the config path the warning names
	}{
		{"misspelt kafka key", "kafka: {brokerz: x}", "kafka.brokerz"},
		{"misspelt top-level section", "kafak: {brokers: [a:1]}", "kafak"},
		{"misspelt stream block", "streams: {presence: {limitz: {}}}", "streams.presence.limitz"},
		{"misspelt limit", "streams: {presence: {limits: {partitons: 3}}}", "streams.presence.limits.partitons"},
		{"misspelt signature key", "streams: {presence: {signature: {secret: [x]}}}", "streams.presence.signature.secret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := testenv.WriteConfig(t, "", tc.yaml)
			// A typo must not stop the process: only a warning.
			cfg := mustLoad(t, path, nil)
			if len(cfg.Warnings) != 1 {
				t.Fatalf("warnings %q, want one naming %s", cfg.Warnings, tc.want)
			}
			w := cfg.Warnings[0]
			if !strings.Contains(w, "unknown key "+tc.want) || !strings.Contains(w, path) {
				t.Errorf("warning %q, want the file %s and the key %s", w, path, tc.want)
			}
		})
	}
}

// Three replicas keep every ack on two brokers unless told otherwise, and
// settings that lose or refuse webhooks when one broker fails are warned of.
func TestLoadMinInsyncReplicas(t *testing.T) {
	cases := []struct {
		yaml    string
		want    int
		warning string // in the one warning; empty: none
	}{
		{"kafka: {replication_factor: 1}", 1, ""},
		{"kafka: {replication_factor: 2}", 1, "may be on one broker only"},
		{"kafka: {replication_factor: 3}", 2, ""},
		{"kafka: {replication_factor: 5}", 2, ""},
		{"kafka: {replication_factor: 3, min_insync_replicas: 1}", 1, "may be on one broker only"},
		{"kafka: {replication_factor: 3, min_insync_replicas: 3}", 3, "any one broker down refuses every write"},
	}
	for _, tc := range cases {
		t.Run(tc.yaml, func(t *testing.T) {
			cfg := mustLoad(t, testenv.WriteConfig(t, "", tc.yaml), nil)
			if got := cfg.Kafka.MinInsyncReplicasOrDefault(); got != tc.want {
				t.Errorf("min_insync_replicas %d, want %d", got, tc.want)
			}
			switch {
			case tc.warning == "" && len(cfg.Warnings) != 0:
				t.Errorf("warnings %q, want none", cfg.Warnings)
			case tc.warning != "" && (len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], tc.warning)):
				t.Errorf("warnings %q, want one saying %q", cfg.Warnings, tc.warning)
			}
		})
	}
}

// Environment overrides win over the file (design §7).
func TestLoadEnvironmentWinsOverFile(t *testing.T) {
	path := testenv.WriteConfig(t, "", `
kafka: {brokers: [file:9092]}
http: {addr: 127.0.0.1:1}
clickhouse: {addr: 127.0.0.1:2, database: fromfile}
data_dir: /from/file
streams:
  presence:
    signature: {secrets: [`+validSecret+`]}
`)
	environ := []string{
		"DRIFTGUARD_KAFKA_BROKERS=env-1:9092, env-2:9092,",
		"DRIFTGUARD_HTTP_ADDR=0.0.0.0:8081",
		"DRIFTGUARD_CLICKHOUSE_ADDR=ch.internal:9000",
		"DRIFTGUARD_CLICKHOUSE_DATABASE=fromenv",
		"DRIFTGUARD_CLICKHOUSE_PASSWORD=from-env",
		"DRIFTGUARD_DATA_DIR=/from/env",
		"DRIFTGUARD_PYROSCOPE_BASIC_AUTH_USER=profiler",
		"DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD=token",
		"DRIFTGUARD_PYROSCOPE_TENANT_ID=team-a",
		"DRIFTGUARD_SECRETS_PRESENCE=" + otherValidSecret + "," + validSecret,
		// Variables of other tools and of the test harness share the prefix
		// and must be left alone.
		"DRIFTGUARD_TEST_KAFKA=127.0.0.1:1",
		"DRIFTGUARD_CONFIG=/ignored.yaml",
		"PATH=/usr/bin",
		"NOEQUALSSIGN",
	}
	cfg := mustLoad(t, path, environ)
	checkFields(t, []field{
		{"BrokersOrDefault()", cfg.BrokersOrDefault(), []string{"env-1:9092", "env-2:9092"}},
		{"HTTP.Addr", cfg.HTTP.Addr, "0.0.0.0:8081"},
		{"ClickHouse.Addr", cfg.ClickHouse.Addr, "ch.internal:9000"},
		{"ClickHouse.Database", cfg.ClickHouse.Database, "fromenv"},
		{"ClickHouse.Password", cfg.ClickHouse.Password, "from-env"},
		{"DataDir", cfg.DataDir, "/from/env"},
		{"Telemetry.PyroscopeBasicAuthUser", cfg.Telemetry.PyroscopeBasicAuthUser, "profiler"},
		{"Telemetry.PyroscopeBasicAuthPassword", cfg.Telemetry.PyroscopeBasicAuthPassword, "token"},
		{"Telemetry.PyroscopeTenantID", cfg.Telemetry.PyroscopeTenantID, "team-a"},
		{"presence secrets", cfg.Streams["presence"].Signature.Secrets, []string{otherValidSecret, validSecret}},
	})
}

func TestLoadEnvironmentSecrets(t *testing.T) {
	newStream := `
streams:
  my_stream:
    policy: latest
    key: /id
    type: {fixed: t}
    schemas: {t: streams/presence.schema.json}
`
	cases := []struct {
		name    string
		yaml    string
		environ []string
		// wantErr lists what the error must say; empty means success.
		wantErr []string
	}{
		{
			name:    "secrets for a stream that is not in the catalogue",
			environ: []string{"DRIFTGUARD_SECRETS_NOSUCH=" + validSecret},
			wantErr: []string{"DRIFTGUARD_SECRETS_NOSUCH", `"nosuch"`},
		},
		{
			name:    "secrets for a stream the file adds",
			yaml:    newStream,
			environ: []string{"DRIFTGUARD_SECRETS_MY_STREAM=" + validSecret},
		},
		{
			// The variable is validated like the file, with the same path.
			name:    "short secret from the environment",
			environ: []string{"DRIFTGUARD_SECRETS_PRESENCE=" + shortSecret},
			wantErr: []string{"in streams.presence.signature.secrets[0]:"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = testenv.WriteConfig(t, "", tc.yaml)
			}
			_, err := config.Load(path, tc.environ)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Load accepted the environment")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestDecodeStandardSecret(t *testing.T) {
	cases := []struct {
		name    string
		secret  string
		wantLen int // 0: an error is expected
	}{
		{"32-byte key", validSecret, 32},
		{"exactly the minimum", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, config.MinSecretBytes)), config.MinSecretBytes},
		{"one byte short", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, config.MinSecretBytes-1)), 0},
		{"empty", "", 0},
		{"prefix only", "whsec_", 0},
		{"no prefix", base64.StdEncoding.EncodeToString(make([]byte, 32)), 0},
		{"not base64", "whsec_%%%%", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := config.DecodeStandardSecret(tc.secret)
			switch {
			case tc.wantLen == 0 && err == nil:
				t.Errorf("accepted, key of %d bytes", len(key))
			case tc.wantLen != 0 && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.wantLen != 0 && len(key) != tc.wantLen:
				t.Errorf("key of %d bytes, want %d", len(key), tc.wantLen)
			}
		})
	}
}

func ExampleLoad() {
	// No file: the shipped catalogue and defaults, with the environment on top.
	cfg, err := config.Load("", []string{"DRIFTGUARD_KAFKA_BROKERS=kafka-1:9092,kafka-2:9092"})
	if err != nil {
		fmt.Println(err)
		return
	}
	presence := cfg.Streams["presence"]
	fmt.Println(cfg.BrokersOrDefault())
	fmt.Println(cfg.StreamNames(), presence.Policy, presence.Key, presence.Limits.Partitions)
	// Output:
	// [kafka-1:9092 kafka-2:9092]
	// [chat orders presence workflow] latest /user_id 6
}

// http.max_in_flight_bytes defaults to DefaultInFlightBodies bodies at the
// largest limits.max_body_bytes of the streams the file loads, not of the
// shipped catalogue alone; a value in the file wins.
func TestLoadSizesTheInFlightBudgetFromTheLoadedStreams(t *testing.T) {
	large := mustLoad(t, testenv.WriteConfig(t, "", "streams:\n  presence:\n    limits:\n      max_body_bytes: 600000\n"), nil)
	if got, want := large.HTTP.MaxInFlightBytes, int64(config.DefaultInFlightBodies*600000); got != want {
		t.Errorf("max_in_flight_bytes with a 600000-byte body limit = %d, want %d", got, want)
	}
	set := mustLoad(t, testenv.WriteConfig(t, "", "http: {max_in_flight_bytes: 50000000}\nstreams:\n  presence:\n    limits:\n      max_body_bytes: 600000\n"), nil)
	if got := set.HTTP.MaxInFlightBytes; got != 50000000 {
		t.Errorf("max_in_flight_bytes set in the file = %d, want 50000000", got)
	}
}

// A message id is the template with {key} and {seq} replaced in one pass,
// as strings.Replacer does it, whatever the key holds.
func TestMessageIDOfReplacesInOnePass(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		part := rapid.SampledFrom([]string{"{key}", "{seq}", "{", "}", "k", ":", "{ke", "y}"})
		tmpl := strings.Join(rapid.SliceOfN(part, 0, 8).Draw(t, "template"), "")
		key := strings.Join(rapid.SliceOfN(part, 0, 4).Draw(t, "key"), "")
		seq := rapid.Int64().Draw(t, "seq")
		want := strings.NewReplacer("{key}", key, "{seq}", strconv.FormatInt(seq, 10)).Replace(tmpl)
		if got := (&config.Assign{MessageID: tmpl}).MessageIDOf(key, seq); got != want {
			t.Fatalf("MessageIDOf(%q, %d) of %q = %q, want %q", key, seq, tmpl, got, want)
		}
	})
}
