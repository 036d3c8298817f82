// Package config loads driftguard's one YAML configuration: defaults that work
// on loopback, the embedded stream catalogue, the operator's file and the
// DRIFTGUARD_* environment overrides, in that order. Validate reports every
// problem with the config path it belongs to.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/driftguard/driftguard/schemas"
)

// Config is the whole configuration. A zero field means its documented default.
type Config struct {
	Kafka      Kafka      `yaml:"kafka"`
	HTTP       HTTP       `yaml:"http"`
	ClickHouse ClickHouse `yaml:"clickhouse"`
	Telemetry  Telemetry  `yaml:"telemetry"`
	Processing Processing `yaml:"processing"`
	Bridge     Bridge     `yaml:"bridge"`
	// DataDir holds local state such as the processors' table storage.
	// Default: $XDG_STATE_HOME/driftguard or ~/.local/state/driftguard.
	DataDir string `yaml:"data_dir" env:"DRIFTGUARD_DATA_DIR"`
	// Streams is the catalogue: the embedded entries, each overridable field
	// by field, plus any new stream defined here.
	Streams map[string]*Stream `yaml:"streams"`

	// baseDir resolves relative schema paths of the operator's file.
	baseDir string
	// Warnings collects what is suspicious but not fatal, such as unknown keys.
	Warnings []string `yaml:"-"`
	// fromEnv maps the config paths the environment set to the variable
	// that set each, for `driftguard config`.
	fromEnv map[string]string
}

// Kafka configures every Kafka client.
type Kafka struct {
	// Brokers are the seed brokers. Default: 127.0.0.1:9092. In `dev` an
	// empty list means the embedded broker.
	Brokers []string `yaml:"brokers" env:"DRIFTGUARD_KAFKA_BROKERS"`
	// ReplicationFactor for topics driftguard creates. Default 1 (one broker
	// on loopback); use 3 in production.
	ReplicationFactor int `yaml:"replication_factor"`
	// MinInsyncReplicas is the min.insync.replicas of the topics driftguard
	// creates: how many replicas hold a record before the broker acks it
	// (acks=all), so before ingest answers 202. Fewer in sync and the
	// broker refuses writes (ingest answers 503) rather than ack a record
	// that one failure could lose. Default 2 when ReplicationFactor is 3
	// or more, else 1; at most ReplicationFactor.
	MinInsyncReplicas int `yaml:"min_insync_replicas"`
	// ProduceTimeout bounds the wait for the broker's ack at the ingest edge.
	// Default 5s.
	ProduceTimeout time.Duration `yaml:"produce_timeout"`
	// Linger is how long ingest's producer waits for more records before it
	// sends a batch: each webhook's ack waits up to this much longer, and
	// the broker handles one produce request for many webhooks instead of
	// one each. Default 20ms: at 200 webhooks a second it sends a third of
	// the requests 5ms did, for ingest about a quarter less CPU per
	// webhook, and its acks 7ms later at the median; under full load, less
	// CPU per webhook for ingest and the broker, acks 3-4ms later. 1µs is
	// as good as none.
	Linger time.Duration `yaml:"linger"`
	// Compression is the codec every producer compresses its batches with:
	// none, snappy, lz4, zstd or gzip. A batch goes out compressed only
	// when that makes it smaller. Default snappy (franz-go's, and what the
	// benchmarks measured the pipeline with).
	Compression string `yaml:"compression" env:"DRIFTGUARD_KAFKA_COMPRESSION"`
	// TopicPrefix starts every topic name; GroupPrefix every consumer
	// group and transactional id (internal/naming), so that a shared
	// cluster grants a team's ACLs by prefix. Default: none.
	TopicPrefix string `yaml:"topic_prefix" env:"DRIFTGUARD_KAFKA_TOPIC_PREFIX"`
	GroupPrefix string `yaml:"group_prefix" env:"DRIFTGUARD_KAFKA_GROUP_PREFIX"`
	// Generations maps a stream to its generation: to re-decide a stream
	// from its `<stream>.in` after a rule change, raise it (2, 3, …), and
	// a new group decides the input again into new topics
	// (`<stream>.g2.state`, …) beside the old ones, until every reader
	// is switched (docs/operations.md, "Re-decide a stream"). Default 1
	// for every stream: the names of design §4.
	Generations map[string]int `yaml:"generations"`
	// TLS and SASL of every client (kafkasec.go).
	TLS  TLS       `yaml:"tls" envprefix:"DRIFTGUARD_KAFKA_TLS_"`
	SASL KafkaSASL `yaml:"sasl"`
}

// HTTP configures the ingest edge's listener and its limits.
type HTTP struct {
	// Addr of the webhook listener. Default 127.0.0.1:8080.
	Addr string `yaml:"addr" env:"DRIFTGUARD_HTTP_ADDR"`
	// MaxInFlightBytes caps the bytes of request bodies the edge holds at
	// once, taken as they arrive (at most twice what a body has sent, or
	// its first 4 KiB) until the producer is done with its record (acked,
	// or failed for good); beyond it a request is answered 503 with
	// Retry-After, before its body is read or when it outgrows the room
	// while read. Default:
	// DefaultInFlightBodies bodies at the largest limits.max_body_bytes
	// (16 MiB with the shipped 256 KiB), which the producer's buffer is
	// sized to as well.
	MaxInFlightBytes int64 `yaml:"max_in_flight_bytes"`
	// MaxPerSource caps the requests one source address (an IPv6 /64) may
	// have in flight at once; more are answered 503 with Retry-After.
	// Default 0: off, since publishers send from a few addresses and, behind
	// a proxy not listed in TrustedProxies, every request has the proxy's.
	MaxPerSource int `yaml:"max_per_source"`
	// TrustedProxies are the addresses or CIDR prefixes of proxies whose
	// X-Forwarded-For is believed: a request from one is attributed to the
	// right-most address of the header that is not a trusted proxy. Empty
	// (the default): the header is ignored and the peer address counts.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// MaxInFlightBytesPerSource caps the bytes of bodies one source holds
	// of MaxInFlightBytes, so that one address (an IPv6 /64; behind a
	// trusted proxy, the client X-Forwarded-For names) cannot hold the
	// whole budget. Default: a quarter of MaxInFlightBytes, and at least
	// the largest limits.max_body_bytes.
	MaxInFlightBytesPerSource int64 `yaml:"max_in_flight_bytes_per_source"`
	// ReadTimeout bounds reading one request, head and body: a body that
	// trickles in slower is cut off and its connection closed. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// MinBodyRate is the slowest a body may arrive, in bytes a second,
	// after its first second: a body that falls behind it is cut off with
	// 408 and its connection closed. A body's deadline is thus its first
	// second plus its declared length at this rate (at most ReadTimeout).
	// Default DefaultMinBodyRate.
	MinBodyRate int64 `yaml:"min_body_rate"`
	// MaxConnections caps the webhook listener's open connections, those
	// closing included; at the cap, the connection idle the longest is
	// closed for a new one, and only when none is idle do new ones wait in
	// the accept queue. With MaxInFlightBytes it bounds the edge's memory
	// under a flood. Default DefaultMaxConnections.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerSource caps the connections one peer address (an
	// IPv6 /64) holds open; one more is closed as soon as it is accepted.
	// Trusted proxies are not capped. Default
	// DefaultMaxConnectionsPerSource (at most MaxConnections).
	MaxConnectionsPerSource int `yaml:"max_connections_per_source"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// RefusalLogLines is how many refused webhooks of one reason (a bad
	// signature, an unknown stream...) are logged per
	// RefusalLogInterval; the rest are counted, and the next line of that
	// reason says how many were left out. Every refusal is counted in
	// driftguard_ingest_rejections_total all the same. Default 10.
	RefusalLogLines int `yaml:"refusal_log_lines"`
	// RefusalLogInterval is the interval of RefusalLogLines. Default 1m.
	RefusalLogInterval time.Duration `yaml:"refusal_log_interval"`
}

// DefaultMaxConnections is http.max_connections by default: far more than
// the publishers and load balancers in front of one edge keep open, and
// at about 32 KiB a connection, 32 MiB.
const DefaultMaxConnections = 1024

// DefaultMaxConnectionsPerSource is http.max_connections_per_source by
// default: an eighth of the default http.max_connections, so that at
// least eight addresses are needed to fill it, and more than a publisher
// (or a proxy that is not trusted) keeps open to one edge.
const DefaultMaxConnectionsPerSource = 128

// DefaultIdleTimeout is http.idle_timeout by default: long enough for a
// publisher's next webhook to reuse its connection, short enough that an
// idle connection is not worth hoarding.
const DefaultIdleTimeout = 5 * time.Second

// DefaultMinBodyRate is http.min_body_rate by default, in bytes a second:
// 32 kbit/s, far below any server's link, so that only a body sent on
// purpose slowly falls behind it.
const DefaultMinBodyRate = 4 << 10

// DefaultInFlightBodies is how many bodies at the largest
// limits.max_body_bytes http.max_in_flight_bytes holds by default: at
// 256 KiB a body, 16 MiB, a small share of an edge's memory, yet room for
// thousands of webhooks of typical size (a few KiB) at once.
const DefaultInFlightBodies = 64

// InFlightBytesFor is the default http.max_in_flight_bytes for streams.
func InFlightBytesFor(streams []*Stream) int64 {
	return DefaultInFlightBodies * largestBody(streams)
}

// largestBody is the largest limits.max_body_bytes of the streams.
func largestBody(streams []*Stream) int64 {
	var largest int64
	for _, s := range streams {
		largest = max(largest, s.Limits.MaxBodyBytes)
	}
	return largest
}

// InFlightBytesPerSource is http.max_in_flight_bytes_per_source by
// default: a quarter of the budget, so that at least four sources are
// needed to fill it, and no less than one body at the largest
// limits.max_body_bytes (nor more than the budget).
func InFlightBytesPerSource(budget int64, streams []*Stream) int64 {
	return min(budget, max(budget/4, largestBody(streams)))
}

// MaxBatchRows is ClickHouse's default max_insert_block_size, the most
// rows clickhouse.batch_rows may ask for.
const MaxBatchRows = 1 << 20

// ClickHouse configures the sink and `migrate`.
type ClickHouse struct {
	// Addr of the native protocol port: host:port, or a comma-separated
	// list of the servers (replicas) of a cluster, tried in order, so every
	// sink writes to and reads from the first that answers. Default
	// 127.0.0.1:9000; ClickHouse Cloud's secure native port is 9440.
	Addr string `yaml:"addr" env:"DRIFTGUARD_CLICKHOUSE_ADDR"`
	// Database receiving driftguard's tables. Default driftguard.
	Database string `yaml:"database" env:"DRIFTGUARD_CLICKHOUSE_DATABASE"`
	// Username and Password; default user "default" with no password.
	// Set the password with DRIFTGUARD_CLICKHOUSE_PASSWORD or PasswordFile
	// rather than in the file.
	Username string `yaml:"username" env:"DRIFTGUARD_CLICKHOUSE_USERNAME"`
	Password string `yaml:"password" env:"DRIFTGUARD_CLICKHOUSE_PASSWORD" redact:"true"`
	// PasswordFile holds the password (a mounted Secret), read once at
	// start; a trailing newline is dropped. Not with Password.
	PasswordFile string `yaml:"password_file" env:"DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE"`
	// TLS to the native port; ClickHouse serves it on tcp_port_secure.
	TLS TLS `yaml:"tls" envprefix:"DRIFTGUARD_CLICKHOUSE_TLS_"`
	// Cluster, when set, makes the migrations create every table and view
	// ON CLUSTER with Replicated engines: the name of a cluster of the
	// servers' remote_servers, whose macros define {shard} and {replica}.
	// Empty (the default): one server, plain MergeTree engines.
	Cluster string `yaml:"cluster" env:"DRIFTGUARD_CLICKHOUSE_CLUSTER"`
	// BatchRows, BatchBytes and BatchPeriod bound one flush (one INSERT
	// per table): the sink flushes when it has gathered BatchRows records
	// or BatchBytes of record keys and values, or BatchPeriod after the
	// first record of the batch. Defaults 50000, 16 MiB and 1s: about one
	// insert per second per table under load, a few hundred MiB of memory.
	BatchRows   int           `yaml:"batch_rows"`
	BatchBytes  int           `yaml:"batch_bytes"`
	BatchPeriod time.Duration `yaml:"batch_period"`
	// ConsumerGroup of the sink: sinks that write different databases from
	// one cluster need groups of their own. Default driftguard-sink-clickhouse.
	ConsumerGroup string `yaml:"consumer_group"`
	// SessionTimeout is how long the group waits for a silent sink (one
	// that crashed) before giving its partitions to the others. Default 45s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// FetchMinBytes is how much the sink asks the broker to gather before a
	// fetch answers (at most batch_period later): fewer, larger fetches.
	// Default 1048576 (1 MiB).
	FetchMinBytes int `yaml:"fetch_min_bytes"`
	// Retention is how long each table keeps its rows; off by default
	// (clickhouse_retention.go).
	Retention ClickHouseRetention `yaml:"retention"`
}

// Processing configures the processors.
type Processing struct {
	// TimerTick is how often each processor checks its keys' timers (gap
	// timeouts, orphan TTLs). Each tick visits every key of the partitions
	// it owns, so a larger tick costs less on big tables. Default 1s.
	TimerTick time.Duration `yaml:"timer_tick"`
	// CommitInterval is how long one transaction gathers decisions before
	// it commits them with their input offsets: the delay a read_committed
	// reader (the sink, the bridge) sees, against the cost of a commit.
	// Default 100ms.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// InstanceID names this processor instance in its transactional ids:
	// stable across its restarts (a restarted instance then fences what
	// its predecessor left open at once) and unique among the instances
	// running. Default: the host name (a StatefulSet pod's name).
	InstanceID string `yaml:"instance_id" env:"DRIFTGUARD_INSTANCE_ID"`
	// FetchMinBytes and FetchMaxWait: a processor's fetch answers once the
	// broker has this many bytes of input for it, or after this long.
	// Larger, rarer fetches cost the broker less per event; the wait adds
	// to a decision's latency only when input is scarce. Defaults 262144
	// (256 KiB) and 50ms.
	FetchMinBytes int           `yaml:"fetch_min_bytes"`
	FetchMaxWait  time.Duration `yaml:"fetch_max_wait"`
}

// MinBridgeSecretBytes is the shortest JWT key the bridge accepts: HS256
// with a key shorter than its 32-byte output is weaker than it should be.
const MinBridgeSecretBytes = 32

// Bridge configures the realtime bridge (`driftguard bridge`).
type Bridge struct {
	// Addr serves the streams and the page; /metrics, /healthz and
	// /readyz are on telemetry.addr only. Default 127.0.0.1:8090.
	Addr string `yaml:"addr" env:"DRIFTGUARD_BRIDGE_ADDR"`
	// Secret is the HS256 key of the JWTs clients present that name no
	// key id (kid), at least 32 bytes. Set it with DRIFTGUARD_BRIDGE_SECRET
	// rather than in the file. The bridge refuses to start without it or
	// a key of Tokens, except in dev.
	Secret string `yaml:"secret" env:"DRIFTGUARD_BRIDGE_SECRET" redact:"true"`
	// Tokens are the other keys of clients' tokens: an identity
	// provider's (JWKS, PEM files), more HS256 keys for rotation, and the
	// claims checked (bridge_tokens.go).
	Tokens BridgeTokens `yaml:"tokens"`
	// AllowedOrigins may read the streams from another origin's pages
	// (CORS); empty (the default) allows none: only the bridge's own page.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// FrameAncestors are the pages that may show the bridge's page in a
	// frame: the sources of its Content-Security-Policy frame-ancestors
	// ('self', https://portal.example.com, https://*.example.com).
	// Default ['none']: no page may frame it, so none can overlay it to
	// trick a click.
	FrameAncestors []string `yaml:"frame_ancestors"`
	// MaxEntities bounds the entities the bridge keeps per stream; one
	// more is dropped, counted and reported by /readyz. Default 1000000.
	MaxEntities int `yaml:"max_entities"`
	// Window is how many recent changes each state partition keeps in
	// memory for clients that resume; older ones are read from Kafka.
	// Default 10000.
	Window int `yaml:"window"`
	// ClientLag is how many changes a client may fall behind the stream
	// before it gets `event: reset` and is disconnected. Default 10000.
	ClientLag int `yaml:"client_lag"`
	// Heartbeat is the longest a client's connection stays silent: a
	// comment line keeps proxies from closing it. Default 15s.
	Heartbeat time.Duration `yaml:"heartbeat"`

	// Admission of SSE streams (bridge_admission.go): what a reconnect
	// storm may take of the bridge at once.
	//
	// MaxConnections caps the SSE streams open on the bridge; one more is
	// 503 with a jittered Retry-After. Default 20000.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerUser caps the SSE streams one token's user holds;
	// one more is 429. Default 64.
	MaxConnectionsPerUser int `yaml:"max_connections_per_user"`
	// AcceptRate is how many new SSE streams a second the bridge takes, a
	// token bucket of AcceptBurst; beyond it, 503 with a Retry-After that
	// spreads the refused over the seconds to come. Default 1000.
	AcceptRate float64 `yaml:"accept_rate"`
	// AcceptBurst is the bucket's size. Default: AcceptRate, rounded up.
	AcceptBurst int `yaml:"accept_burst"`
	// Limits of the public listener (bridge_limits.go): what one source
	// may take of the bridge without a token, and one token with it.
	//
	// MaxTCPConnections caps the connections the public listener holds
	// open; at the cap, the one idle the longest is closed for a new one.
	// Default 25000.
	MaxTCPConnections int `yaml:"max_tcp_connections"`
	// MaxTCPConnectionsPerSource caps one source's connections (an IPv4
	// address, an IPv6 /64, the client a trusted proxy names); one more is
	// closed as it is accepted. Default 4096.
	MaxTCPConnectionsPerSource int `yaml:"max_tcp_connections_per_source"`
	// TrustedProxies are the proxies (addresses or CIDRs) whose
	// X-Forwarded-For names the source; they are not capped per source.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// IdleTimeout closes a keep-alive connection that waits this long
	// for its next request, and one that sent none. Default 20s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxStreamsPerToken caps the SSE streams open on one token; one more
	// is 429 too_many_streams. Default 32.
	MaxStreamsPerToken int `yaml:"max_streams_per_token"`
	// SourceRate limits the requests of one source on the public port;
	// beyond it, 429 rate_limited with Retry-After. Default 1000 a second
	// in bursts of 2000.
	SourceRate TokenBucket `yaml:"source_rate"`
	// CatchupReaders is how many Kafka readers per stream serve the
	// clients that resume from cursors older than the log, each shared by
	// every client waiting when it starts. Default 2.
	CatchupReaders int `yaml:"catchup_readers"`
	// ChatWindow is how many recent messages each conversation of an
	// assign stream keeps for catch-up. Default 1000.
	ChatWindow int `yaml:"chat_window"`
	// ChatHistory bounds how far back the bridge reads an assign stream's
	// outcomes when it starts, to index the conversations' messages and
	// fill their windows. Default 0: from the log start, as far back as
	// the outcomes' retention holds.
	ChatHistory time.Duration `yaml:"chat_history"`
	// TypingTTL is how long a typing signal shows: its expires_at_ms is
	// the time it was produced plus this. Default 5s.
	TypingTTL time.Duration `yaml:"typing_ttl"`
	// TypingRate is how many typing signals per second a user's typing
	// in one conversation is produced and shown; more within the interval
	// are coalesced (answered 202, not produced). Default 1.
	TypingRate float64 `yaml:"typing_rate"`

	// SendWait is how long a client's send or receipt through the bridge
	// waits for the processor's decision before it is answered 202
	// pending (bridge_send.go). Default 5s.
	SendWait time.Duration `yaml:"send_wait"`
	// SendRate limits clients' sends per user and per conversation; off
	// by default.
	SendRate SendRate `yaml:"send_rate"`
}

// Telemetry configures the operational endpoints of the non-HTTP components.
type Telemetry struct {
	// Addr serves /metrics, /healthz and /readyz of every component,
	// apart from any public listener. Default 127.0.0.1:9464.
	Addr string `yaml:"addr" env:"DRIFTGUARD_TELEMETRY_ADDR"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level" env:"DRIFTGUARD_LOG_LEVEL"`
	// PyroscopeAddr is a Pyroscope server (http://pyroscope:4040) that
	// every component sends its continuous profiles to; empty: none.
	PyroscopeAddr string `yaml:"pyroscope_addr" env:"DRIFTGUARD_PYROSCOPE_ADDR"`
	// PyroscopeUploadEvery is how often profiles are sent. Default 15s.
	PyroscopeUploadEvery time.Duration `yaml:"pyroscope_upload_every"`
	// PyroscopeBasicAuthUser and PyroscopeBasicAuthPassword authenticate
	// to the Pyroscope server (Grafana Cloud Profiles: the stack's user id
	// and an access token); empty: no authentication.
	PyroscopeBasicAuthUser     string `yaml:"pyroscope_basic_auth_user" env:"DRIFTGUARD_PYROSCOPE_BASIC_AUTH_USER"`
	PyroscopeBasicAuthPassword string `yaml:"pyroscope_basic_auth_password" env:"DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD" redact:"true"`
	// PyroscopeTenantID is sent as X-Scope-OrgID, the tenant of a
	// multi-tenant server (Grafana Pyroscope, Phlare); empty: none.
	PyroscopeTenantID string `yaml:"pyroscope_tenant_id" env:"DRIFTGUARD_PYROSCOPE_TENANT_ID"`
	// Pprof serves Go's profiles (/debug/pprof/) on Addr, for a profile
	// taken on demand where no Pyroscope server runs: the benchmarks take
	// one of every component under load this way. Off by default: a CPU
	// profile costs the process while it runs, and Addr is reachable from
	// inside the cluster.
	Pprof bool `yaml:"pprof" env:"DRIFTGUARD_TELEMETRY_PPROF"`
	// AdminToken turns on the admin endpoints (/admin/v1/...) on Addr:
	// comma-separated bearer tokens, each `subject:token` (the subject is
	// recorded as who asked) or a bare token (subject "admin"), each at
	// least 24 bytes. Empty (the default): the admin endpoints are off.
	AdminToken string `yaml:"admin_token" env:"DRIFTGUARD_ADMIN_TOKEN" redact:"true"`
	// AdminTokenFile holds AdminToken (a mounted Secret), read at start.
	AdminTokenFile string `yaml:"admin_token_file" env:"DRIFTGUARD_ADMIN_TOKEN_FILE"`
}

// Default returns the configuration with every default filled in and the
// embedded catalogue loaded.
func Default() (*Config, error) {
	c, err := catalogue()
	if err != nil {
		return nil, err
	}
	c.applyDefaults()
	return c, nil
}

// catalogue is the configuration of the embedded catalogue alone, no
// default filled in.
func catalogue() (*Config, error) {
	c := &Config{}
	if err := c.mergeYAML(schemas.Catalogue, "embedded catalogue", ""); err != nil {
		return nil, err
	}
	return c, nil
}

// Load builds the configuration from the embedded catalogue, the file at
// path (if not empty) and the environment, fills in the defaults, then
// validates it. The defaults come last because some follow what the file
// sets: http.max_in_flight_bytes is sized from the streams loaded, and a
// stream's policy decides which of its defaults apply.
func Load(path string, environ []string) (*Config, error) {
	c, err := catalogue()
	if err != nil {
		return nil, err
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := c.mergeYAML(data, path, filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	passwordInFile := c.Kafka.SASL.Password != ""
	if err := c.applyEnv(environ); err != nil {
		return nil, err
	}
	if err := c.readSecretFiles(); err != nil {
		return nil, err
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.warnDurability()
	c.warnSecurity(passwordInFile)
	c.warnNaming()
	return c, nil
}

// mergeYAML decodes data over c: scalars replace, stream entries merge field
// by field into the entry of the same name.
func (c *Config) mergeYAML(data []byte, source, baseDir string) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config %s: %w", source, err)
	}
	if len(root.Content) == 0 {
		return nil
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: the top level must be a mapping", source)
	}
	for _, w := range unknownKeys(doc, c, "") {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s: unknown key %s", source, w))
	}
	// Streams merge per entry; everything else decodes directly.
	var streams *yaml.Node
	rest := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "streams" {
			streams = doc.Content[i+1]
			continue
		}
		rest.Content = append(rest.Content, doc.Content[i], doc.Content[i+1])
	}
	if err := rest.Decode(c); err != nil {
		return fmt.Errorf("config %s: %w", source, err)
	}
	if streams == nil {
		return nil
	}
	if streams.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: streams must be a mapping of stream name to entry", source)
	}
	if c.Streams == nil {
		c.Streams = map[string]*Stream{}
	}
	for i := 0; i+1 < len(streams.Content); i += 2 {
		name := streams.Content[i].Value
		s := c.Streams[name]
		if s == nil {
			s = &Stream{}
			c.Streams[name] = s
		}
		if err := streams.Content[i+1].Decode(s); err != nil {
			return fmt.Errorf("config %s: streams.%s: %w", source, name, err)
		}
		s.Name = name
		if baseDir != "" {
			s.baseDir = baseDir
		}
	}
	return nil
}

func (c *Config) applyDefaults() {
	orDefault(&c.Kafka.ReplicationFactor, 1)
	orDefault(&c.Kafka.ProduceTimeout, 5*time.Second)
	orDefault(&c.Kafka.Linger, 20*time.Millisecond)
	orDefault(&c.Kafka.Compression, CompressionSnappy)
	orDefault(&c.HTTP.Addr, "127.0.0.1:8080")
	orDefault(&c.ClickHouse.Addr, "127.0.0.1:9000")
	orDefault(&c.ClickHouse.Database, "driftguard")
	orDefault(&c.ClickHouse.Username, "default")
	orDefault(&c.ClickHouse.BatchRows, 50_000)
	orDefault(&c.ClickHouse.BatchBytes, 16<<20)
	orDefault(&c.ClickHouse.BatchPeriod, time.Second)
	orDefault(&c.ClickHouse.ConsumerGroup, "driftguard-sink-clickhouse")
	orDefault(&c.ClickHouse.SessionTimeout, 45*time.Second)
	orDefault(&c.ClickHouse.FetchMinBytes, 1<<20)
	orDefault(&c.Telemetry.Addr, "127.0.0.1:9464")
	orDefault(&c.Telemetry.LogLevel, "info")
	orDefault(&c.Telemetry.PyroscopeUploadEvery, 15*time.Second)
	orDefault(&c.Processing.TimerTick, time.Second)
	orDefault(&c.Processing.CommitInterval, 100*time.Millisecond)
	orDefault(&c.Processing.FetchMinBytes, 256<<10)
	orDefault(&c.Processing.FetchMaxWait, 50*time.Millisecond)
	if c.Processing.InstanceID == "" {
		c.Processing.InstanceID, _ = os.Hostname()
	}
	orDefault(&c.Bridge.Addr, "127.0.0.1:8090")
	orDefault(&c.Bridge.MaxEntities, 1_000_000)
	orDefault(&c.Bridge.Window, 10_000)
	orDefault(&c.Bridge.ClientLag, 10_000)
	orDefault(&c.Bridge.Heartbeat, 15*time.Second)
	if len(c.Bridge.FrameAncestors) == 0 {
		c.Bridge.FrameAncestors = []string{"'none'"}
	}
	orDefault(&c.Bridge.ChatWindow, 1000)
	orDefault(&c.Bridge.TypingTTL, 5*time.Second)
	orDefault(&c.Bridge.TypingRate, 1)
	c.Bridge.applySendDefaults()
	c.Bridge.admissionDefaults()
	c.Bridge.limitDefaults()
	c.Bridge.Tokens.applyDefaults()
	if c.DataDir == "" {
		c.DataDir = defaultDataDir()
	}
	if rest, ok := strings.CutPrefix(c.DataDir, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			c.DataDir = filepath.Join(home, rest)
		}
	}
	for _, s := range c.Streams {
		s.applyDefaults()
	}
	orDefault(&c.HTTP.ReadTimeout, 30*time.Second)
	orDefault(&c.HTTP.MaxConnections, DefaultMaxConnections)
	orDefault(&c.HTTP.MaxConnectionsPerSource, min(DefaultMaxConnectionsPerSource, c.HTTP.MaxConnections))
	orDefault(&c.HTTP.IdleTimeout, DefaultIdleTimeout)
	orDefault(&c.HTTP.MinBodyRate, DefaultMinBodyRate)
	orDefault(&c.HTTP.RefusalLogLines, 10)
	orDefault(&c.HTTP.RefusalLogInterval, time.Minute)
	// After the streams: sized from their body limits.
	orDefault(&c.HTTP.MaxInFlightBytes, InFlightBytesFor(c.StreamList()))
	orDefault(&c.HTTP.MaxInFlightBytesPerSource, InFlightBytesPerSource(c.HTTP.MaxInFlightBytes, c.StreamList()))
}

// orDefault sets *field to def when it holds its zero value: in this
// config, zero always means "the documented default".
func orDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "driftguard")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "driftguard")
	}
	return filepath.Join(os.TempDir(), "driftguard")
}

// BrokersOr returns brokers, or the configured ones when brokers is empty.
func (c *Config) BrokersOr(brokers []string) []string {
	if len(brokers) > 0 {
		return brokers
	}
	return c.BrokersOrDefault()
}

// BrokersOrDefault returns the configured brokers, or the loopback default.
// Only `dev` reads an empty list differently: as "start the embedded broker".
func (c *Config) BrokersOrDefault() []string {
	if len(c.Kafka.Brokers) == 0 {
		return []string{"127.0.0.1:9092"}
	}
	return c.Kafka.Brokers
}

// MinInsyncReplicasOrDefault returns the configured min.insync.replicas,
// or its default, which follows the replication factor (and so is not
// filled in with the other defaults): 2 on three replicas or more, so that
// every ack is on two brokers and one broker may be down without refusing
// writes; else 1.
func (k Kafka) MinInsyncReplicasOrDefault() int {
	switch {
	case k.MinInsyncReplicas != 0:
		return k.MinInsyncReplicas
	case k.ReplicationFactor >= 3:
		return 2
	default:
		return 1
	}
}

// StreamNames returns the catalogue's stream names in a stable order.
func (c *Config) StreamNames() []string {
	names := make([]string, 0, len(c.Streams))
	for name := range c.Streams {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// StreamList returns the catalogue's streams in StreamNames order.
func (c *Config) StreamList() []*Stream {
	streams := make([]*Stream, 0, len(c.Streams))
	for _, name := range c.StreamNames() {
		streams = append(streams, c.Streams[name])
	}
	return streams
}

// warnDurability warns of replication settings that are valid but lose or
// refuse webhooks under a single broker failure.
func (c *Config) warnDurability() {
	k := c.Kafka
	switch minISR := k.MinInsyncReplicasOrDefault(); {
	case k.ReplicationFactor > 1 && minISR == 1:
		c.Warnings = append(c.Warnings, fmt.Sprintf("kafka.min_insync_replicas is 1 with kafka.replication_factor %d: an accepted webhook may be on one broker only, and lost with it", k.ReplicationFactor))
	case k.ReplicationFactor > 1 && minISR == k.ReplicationFactor:
		c.Warnings = append(c.Warnings, fmt.Sprintf("kafka.min_insync_replicas equals kafka.replication_factor (%d): any one broker down refuses every write (ingest answers 503)", k.ReplicationFactor))
	}
}

// Validate checks the whole configuration and returns every problem found,
// each prefixed with its config path.
func (c *Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if c.Kafka.ReplicationFactor < 1 {
		add("kafka.replication_factor", "must be at least 1, got %d", c.Kafka.ReplicationFactor)
	}
	// Against a valid replication factor only: one error per problem.
	if m := c.Kafka.MinInsyncReplicasOrDefault(); c.Kafka.ReplicationFactor >= 1 && (m < 1 || m > c.Kafka.ReplicationFactor) {
		add("kafka.min_insync_replicas", "must be between 1 and kafka.replication_factor (%d), got %d: more could never be in sync, and every write would be refused", c.Kafka.ReplicationFactor, m)
	}
	if c.Kafka.ProduceTimeout < 0 {
		add("kafka.produce_timeout", "must be positive, got %s", c.Kafka.ProduceTimeout)
	}
	if c.Kafka.Linger < 0 || c.Kafka.Linger > time.Second {
		add("kafka.linger", "must be between 0 and 1s (every ack waits for it), got %s", c.Kafka.Linger)
	}
	if !slices.Contains(Compressions, c.Kafka.Compression) {
		add("kafka.compression", "must be one of %s, got %q", strings.Join(Compressions, ", "), c.Kafka.Compression)
	}
	if c.Processing.FetchMinBytes < 1 {
		add("processing.fetch_min_bytes", "must be at least 1, got %d", c.Processing.FetchMinBytes)
	}
	if c.Processing.FetchMaxWait < time.Millisecond || c.Processing.FetchMaxWait > time.Second {
		add("processing.fetch_max_wait", "must be between 1ms and 1s (every decision may wait for it), got %s", c.Processing.FetchMaxWait)
	}
	if c.ClickHouse.FetchMinBytes < 1 {
		add("clickhouse.fetch_min_bytes", "must be at least 1, got %d", c.ClickHouse.FetchMinBytes)
	}
	c.Kafka.validateSecurity(add)
	for i, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ":") {
			add(fmt.Sprintf("kafka.brokers[%d]", i), "%q needs host:port", b)
		}
	}
	errs = append(errs, c.validateNaming()...)
	errs = append(errs, c.HTTP.validate(c.StreamList())...)
	errs = append(errs, c.ClickHouse.validate()...)
	errs = append(errs, c.validateGenerations()...)
	if c.Processing.CommitInterval < 10*time.Millisecond || c.Processing.CommitInterval > time.Minute {
		add("processing.commit_interval", "must be between 10ms and 1m, got %s", c.Processing.CommitInterval)
	}
	if c.Processing.InstanceID == "" {
		add("processing.instance_id", "is empty and the host has no name: set DRIFTGUARD_INSTANCE_ID")
	}
	if c.Processing.TimerTick < 10*time.Millisecond {
		add("processing.timer_tick", "must be at least 10ms, got %s", c.Processing.TimerTick)
	}
	// Above ClickHouse's max_insert_block_size (1048576) a block could be
	// split, and a block must be written once or not at all.
	if c.ClickHouse.BatchRows < 1 || c.ClickHouse.BatchRows > MaxBatchRows {
		add("clickhouse.batch_rows", "must be between 1 and %d, got %d", MaxBatchRows, c.ClickHouse.BatchRows)
	}
	if c.ClickHouse.BatchBytes < 1<<10 {
		add("clickhouse.batch_bytes", "must be at least 1024, got %d", c.ClickHouse.BatchBytes)
	}
	if c.ClickHouse.SessionTimeout < time.Second {
		add("clickhouse.session_timeout", "must be at least 1s, got %s", c.ClickHouse.SessionTimeout)
	}
	if c.ClickHouse.BatchPeriod < time.Millisecond {
		add("clickhouse.batch_period", "must be at least 1ms, got %s", c.ClickHouse.BatchPeriod)
	}
	errs = append(errs, c.Bridge.validateTokens()...)
	for name, v := range map[string]int{"max_entities": c.Bridge.MaxEntities, "window": c.Bridge.Window, "client_lag": c.Bridge.ClientLag, "chat_window": c.Bridge.ChatWindow} {
		if v < 1 {
			add("bridge."+name, "must be at least 1, got %d", v)
		}
	}
	errs = append(errs, c.Bridge.validateAdmission()...)
	errs = append(errs, c.Bridge.validateLimits()...)
	if c.Bridge.ChatHistory < 0 {
		add("bridge.chat_history", "must be 0 (read the outcomes from their log start) or positive, got %s", c.Bridge.ChatHistory)
	}
	if c.Bridge.Heartbeat < 100*time.Millisecond {
		add("bridge.heartbeat", "must be at least 100ms, got %s", c.Bridge.Heartbeat)
	}
	if c.Bridge.TypingTTL < 100*time.Millisecond || c.Bridge.TypingTTL > time.Minute {
		add("bridge.typing_ttl", "must be from 100ms to 1m (how long a typing signal shows), got %s", c.Bridge.TypingTTL)
	}
	if !(c.Bridge.TypingRate > 0 && c.Bridge.TypingRate <= 100) {
		add("bridge.typing_rate", "must be above 0 and at most 100 typing signals a second per user and conversation, got %g", c.Bridge.TypingRate)
	}
	c.Bridge.validateSend(add)
	for i, origin := range c.Bridge.AllowedOrigins {
		if origin != "*" && !strings.HasPrefix(origin, "http://") && !strings.HasPrefix(origin, "https://") {
			add(fmt.Sprintf("bridge.allowed_origins[%d]", i), "%q is not an origin (scheme://host[:port]) or *", origin)
		}
	}
	errs = append(errs, validateFrameAncestors(c.Bridge.FrameAncestors)...)
	if a := c.Telemetry.PyroscopeAddr; a != "" && !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
		add("telemetry.pyroscope_addr", "%q is not an http:// or https:// address", a)
	}
	if c.Telemetry.PyroscopeBasicAuthPassword != "" && c.Telemetry.PyroscopeBasicAuthUser == "" {
		add("telemetry.pyroscope_basic_auth_user", "is required with telemetry.pyroscope_basic_auth_password (DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD)")
	}
	if c.Telemetry.PyroscopeUploadEvery < time.Second {
		add("telemetry.pyroscope_upload_every", "must be at least 1s, got %s", c.Telemetry.PyroscopeUploadEvery)
	}
	switch c.Telemetry.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("telemetry.log_level", "must be debug, info, warn or error, got %q", c.Telemetry.LogLevel)
	}
	if len(c.Streams) == 0 {
		add("streams", "the catalogue has no streams")
	}
	for _, name := range c.StreamNames() {
		errs = append(errs, c.Streams[name].validate("streams."+name)...)
	}
	return errors.Join(errs...)
}

func validIdent(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// Example returns a commented configuration file showing every key with its
// default, for `driftguard config --example`.
func Example() []byte { return []byte(exampleYAML) }

const exampleYAML = `# driftguard configuration. Every key is optional; shown are the defaults.
kafka:
  brokers: [127.0.0.1:9092]      # DRIFTGUARD_KAFKA_BROKERS=a:9092,b:9092
  replication_factor: 1          # use 3 in production
  # min_insync_replicas: 1       # default 2 when replication_factor is 3 or more
  produce_timeout: 5s            # ingest answers 503 after this
  linger: 20ms                   # ingest's producer batches webhooks this long
  compression: snappy            # DRIFTGUARD_KAFKA_COMPRESSION: none, snappy, lz4, zstd or gzip
  tls:                           # every client; any key below turns TLS on
    enabled: false               # DRIFTGUARD_KAFKA_TLS_ENABLED; system roots unless ca_file
    # ca_file: /etc/kafka-tls/ca.crt     # DRIFTGUARD_KAFKA_TLS_CA_FILE: PEM CAs of the brokers
    # cert_file: /etc/kafka-tls/tls.crt  # DRIFTGUARD_KAFKA_TLS_CERT_FILE: client certificate (mTLS),
    # key_file: /etc/kafka-tls/tls.key   # DRIFTGUARD_KAFKA_TLS_KEY_FILE: and its key
    # server_name: kafka.internal        # DRIFTGUARD_KAFKA_TLS_SERVER_NAME: when not the dialed host
  sasl:
    mechanism: ""                # DRIFTGUARD_KAFKA_SASL_MECHANISM: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM
    # username: driftguard               # DRIFTGUARD_KAFKA_SASL_USERNAME (PLAIN, SCRAM)
    # password: prefer DRIFTGUARD_KAFKA_SASL_PASSWORD or password_file to the file
    # password_file: /etc/kafka-sasl/password  # DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE: read at start
    # token_file: /var/run/secrets/kafka/token # DRIFTGUARD_KAFKA_SASL_TOKEN_FILE (OAUTHBEARER): read at every login
    # AWS_MSK_IAM: credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
  topic_prefix: ""               # DRIFTGUARD_KAFKA_TOPIC_PREFIX, e.g. team-a.: starts every topic name
  group_prefix: ""               # DRIFTGUARD_KAFKA_GROUP_PREFIX: starts every consumer group and transactional id
  generations: {}                # e.g. {presence: 2}: re-decide presence.in into presence.g2.* (default 1: design names)
http:
  addr: 127.0.0.1:8080           # DRIFTGUARD_HTTP_ADDR
  # max_in_flight_bytes: 64 bodies at the largest limits.max_body_bytes (16 MiB); 503 beyond it
  # max_in_flight_bytes_per_source: a quarter of max_in_flight_bytes (4 MiB): one source's bodies
  max_per_source: 0              # requests in flight per source address (IPv6: per /64); 0: off
  trusted_proxies: []            # proxies (addresses or CIDRs) whose X-Forwarded-For is believed; not capped per source
  read_timeout: 30s              # a request's head and body must arrive within this
  min_body_rate: 4096            # bytes a second a body must keep after its first second; 408 below
  max_connections: 1024          # open connections; at the cap the one idle the longest is closed for a new one
  max_connections_per_source: 128 # open connections of one peer address (IPv6: per /64)
  idle_timeout: 5s               # a keep-alive connection's wait for its next request
  refusal_log_lines: 10          # refused webhooks logged per reason and interval; the rest counted
  refusal_log_interval: 1m
clickhouse:
  addr: 127.0.0.1:9000           # DRIFTGUARD_CLICKHOUSE_ADDR (native protocol); a cluster's replicas: a:9440,b:9440
  database: driftguard           # DRIFTGUARD_CLICKHOUSE_DATABASE
  username: default              # DRIFTGUARD_CLICKHOUSE_USERNAME
  password: ""                   # prefer DRIFTGUARD_CLICKHOUSE_PASSWORD to the file,
  # password_file: /etc/driftguard/clickhouse/password   # or a mounted Secret (DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE)
  tls:                           # DRIFTGUARD_CLICKHOUSE_TLS_*; on when any key below is set
    enabled: false               # the secure native port (9440), with the system's roots unless ca_file
    # ca_file: /etc/driftguard/clickhouse/ca.crt       # PEM CAs the server's certificate is checked against
    # cert_file: /etc/driftguard/clickhouse/tls.crt    # a client certificate (mTLS), with key_file
    # key_file: /etc/driftguard/clickhouse/tls.key
    # server_name: clickhouse.example.com              # default: the host dialled
  cluster: ""                    # DRIFTGUARD_CLICKHOUSE_CLUSTER: migrations ON CLUSTER, Replicated engines
  batch_rows: 50000              # flush after this many records,
  batch_bytes: 16777216          # or this many bytes of keys and values (16 MiB),
  batch_period: 1s               # or this long after the batch's first record
  consumer_group: driftguard-sink-clickhouse
  session_timeout: 45s           # a crashed sink's partitions move after this
  fetch_min_bytes: 1048576       # a fetch gathers this much, or waits batch_period
  retention:                     # how long each table keeps rows; 0: forever (TTL on 19.6+, else month partitions dropped)
    events: 0s                   # e.g. 2160h (90 days), by processed_at
    dlq: 0s                      # by dead_at
    orphans: 0s                  # by expired_at
    ordering_minute: 0s          # by minute
    replay_requests: 0s          # by requested_at
    every: 0s                    # the sink applies it this often; 0: only "driftguard retention"
processing:
  timer_tick: 1s                 # how often timers (gap timeouts) are checked
  commit_interval: 100ms         # how long one transaction gathers decisions
  fetch_min_bytes: 262144        # a fetch gathers this much input,
  fetch_max_wait: 50ms           # or answers after this long
  # instance_id: the host name   # DRIFTGUARD_INSTANCE_ID: stable per instance, unique among those running
bridge:
  addr: 127.0.0.1:8090           # DRIFTGUARD_BRIDGE_ADDR
  # secret: prefer DRIFTGUARD_BRIDGE_SECRET (at least 32 bytes) to the file
  allowed_origins: []            # origins whose pages may read the streams (CORS)
  frame_ancestors: ["'none'"]    # pages that may frame the bridge's page (CSP frame-ancestors)
  max_entities: 1000000          # per stream
  window: 10000                  # recent changes per state partition kept in memory
  client_lag: 10000              # changes a client may fall behind before it is reset
  heartbeat: 15s
  max_connections: 20000         # SSE streams open at once; one more is 503 with Retry-After
  max_connections_per_user: 64   # SSE streams of one user; one more is 429
  max_streams_per_token: 32      # SSE streams on one token; one more is 429
  max_tcp_connections: 25000     # connections of the public listener; at it the longest idle is closed
  max_tcp_connections_per_source: 4096 # connections of one address (IPv6: /64)
  trusted_proxies: []            # proxies (addresses or CIDRs) whose X-Forwarded-For names the source
  idle_timeout: 20s              # a keep-alive connection waits this long for its next request
  source_rate: {rate: 1000, burst: 2000} # requests a second of one source; beyond them 429
  accept_rate: 1000              # new SSE streams a second; beyond them 503 with a spread Retry-After
  accept_burst: 1000             # the accept rate's bucket; default: one second's worth
  catchup_readers: 2             # Kafka readers per stream shared by resumes older than the window
  chat_window: 1000              # recent messages per conversation
  chat_history: 0s               # how far back chat catch-up reads at start; 0s: from the log start
  send_wait: 5s                  # a client's send waits this long for its decision, then 202 pending
  send_rate:                     # sends through the bridge, 429 over: rate a second (0: off), burst
    per_user: {rate: 0, burst: 0}
    per_conversation: {rate: 0, burst: 0}
telemetry:
  addr: 127.0.0.1:9464           # /metrics, /healthz, /readyz of ingest, process and sink
  log_level: info
  pyroscope_addr: ""             # DRIFTGUARD_PYROSCOPE_ADDR, e.g. http://pyroscope:4040: continuous profiles
  pyroscope_upload_every: 15s
  pyroscope_basic_auth_user: ""  # DRIFTGUARD_PYROSCOPE_BASIC_AUTH_USER
  # pyroscope_basic_auth_password: prefer DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD to the file
  pyroscope_tenant_id: ""        # DRIFTGUARD_PYROSCOPE_TENANT_ID, sent as X-Scope-OrgID
  pprof: false                   # DRIFTGUARD_TELEMETRY_PPROF: /debug/pprof/ on addr, profiles on demand
  # admin_token: prefer DRIFTGUARD_ADMIN_TOKEN=oncall:<24+ bytes> or admin_token_file;
  # unset, the admin endpoints (/admin/v1/...) are off
  # admin_token_file: /etc/driftguard/admin/token   # DRIFTGUARD_ADMIN_TOKEN_FILE
data_dir: ~/.local/state/driftguard   # DRIFTGUARD_DATA_DIR
streams:
  presence:
    # Secrets: prefer DRIFTGUARD_SECRETS_PRESENCE=whsec_a,whsec_b to the file;
    # in the file they go under signature.secrets.
    limits:
      partitions: 6
    retention:                   # how long each delete-policy topic keeps its records
      in: 168h
      outcomes: 168h
      dlq: 336h
      replay: 168h               # gapless streams only
      ephemeral: 10m             # streams with ephemeral_types only
`

// The codecs of kafka.compression.
const (
	CompressionNone   = "none"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
)

// Compressions are kafka.compression's values.
var Compressions = []string{CompressionNone, CompressionSnappy, CompressionLZ4, CompressionZstd, CompressionGzip}
