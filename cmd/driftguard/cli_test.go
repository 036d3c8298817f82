package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/golang-jwt/jwt/v5"
)

// isolateEnv clears every variable Run reads, so the developer's shell (or a
// CI job) cannot change what a test sees. Run reads os.Environ, so tests set
// their inputs with t.Setenv after this.
func isolateEnv(t *testing.T) {
	t.Helper()
	t.Setenv("DRIFTGUARD_CONFIG", "")
	// Empty, a variable of the configuration sets nothing.
	for _, v := range config.EnvVariables() {
		t.Setenv(v.Name, "")
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DRIFTGUARD_SECRETS_") {
			// Secrets naming a stream that is not in the catalogue fail
			// Load even when empty, so unset them; t.Setenv restores them.
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(testenv.Context(t, time.Minute), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func TestRunHelpListsEveryCommand(t *testing.T) {
	isolateEnv(t)
	cases := []struct {
		args     []string
		wantCode int
	}{
		{[]string{"help"}, 0},
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		// No command at all is a usage error, but still shows the help.
		{nil, 2},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q", tc.args), func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != tc.wantCode {
				t.Errorf("exit %d, want %d", r.code, tc.wantCode)
			}
			for _, cmd := range []string{"dev", "ingest", "process", "sink", "migrate", "topics", "config"} {
				if !strings.Contains(r.stdout, "\n  "+cmd+" ") {
					t.Errorf("help does not list %q:\n%s", cmd, r.stdout)
				}
			}
		})
	}
}

// A command's --help shows its own flags and nothing else's.
func TestRunCommandHelp(t *testing.T) {
	isolateEnv(t)
	for _, c := range commands {
		r := runCLI(t, c.name, "--help")
		if r.code != 0 || !strings.Contains(r.stderr, "Usage: driftguard "+c.name) {
			t.Errorf("%s --help: %v", c.name, r)
		}
		for _, flag := range []string{"-demo", "-print", "-check", "-streams"} {
			if own := strings.Contains(c.args, "-"+flag); strings.Contains(r.stderr, "  "+flag) != own {
				t.Errorf("%s --help lists %s: %v, want %v\n%s", c.name, flag, !own, own, r.stderr)
			}
		}
	}
}

func TestRunUsageErrorsExit2(t *testing.T) {
	isolateEnv(t)
	cases := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"topics", "--no-such-flag"}, "no-such-flag"},
		// Each command takes only its own flags, and a wrong one shows
		// that command's help.
		{"another command's flag", []string{"migrate", "--print", "--demo", "--streams", "nonexistent"}, "flag provided but not defined: -demo\nUsage: driftguard migrate [--config FILE] [--print]"},
		{"a flag of dev on process", []string{"process", "--demo"}, "Usage: driftguard process [--config FILE] [--streams a,b] [--no-create]"},
		{"an argument", []string{"topics", "extra"}, `unexpected argument "extra"`},
		{"a stream not in the catalogue", []string{"process", "--streams", "nonexistent"}, `--streams names "nonexistent", which is not in the catalogue`},
		{"version takes no --config", []string{"version", "--config", "x.yaml"}, "flag provided but not defined: -config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("want exit 2 and stderr with %q; got %v", tc.wantStderr, r)
			}
		})
	}
}

func TestRunInvalidConfigExits2NamingThePath(t *testing.T) {
	isolateEnv(t)
	path := testenv.WriteConfig(t, "", "streams: {presence: {limits: {partitions: -3}}}\n")
	cases := []struct {
		name string
		args []string
		env  string // DRIFTGUARD_CONFIG
	}{
		{"file from --config", []string{"topics", "--config", path}, ""},
		{"file from DRIFTGUARD_CONFIG", []string{"topics"}, path},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DRIFTGUARD_CONFIG", tc.env)
			// No broker is reachable: the config must be refused before
			// anything connects.
			t.Setenv("DRIFTGUARD_KAFKA_BROKERS", "127.0.0.1:1")
			r := runCLI(t, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, "in streams.presence.limits.partitions") {
				t.Errorf("want exit 2 naming streams.presence.limits.partitions; got %v", r)
			}
		})
	}
}

// `driftguard config --example` is meant to be saved and edited: what it
// prints must load, with no unknown keys, and (its header says "shown are
// the defaults") configure exactly the defaults.
func TestRunConfigExamplePrintsLoadableDefaults(t *testing.T) {
	isolateEnv(t)
	// Pin the data dir default to the home folder form the example shows.
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", "")

	// The example needs no configuration: a broken one does not stop it.
	t.Setenv("DRIFTGUARD_CONFIG", testenv.WriteConfig(t, "", "kafka: ["))
	r := runCLI(t, "config", "--example")
	if r.code != 0 || r.stdout == "" {
		t.Fatalf("config: %v", r)
	}
	path := testenv.WriteConfig(t, "", r.stdout)
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("the printed configuration does not load:\n%v\n%s", err, r.stdout)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("the printed configuration has unknown keys: %q", cfg.Warnings)
	}
	def, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"brokers", cfg.BrokersOrDefault(), def.BrokersOrDefault()},
		{"kafka", fmt.Sprint(cfg.Kafka.ReplicationFactor, cfg.Kafka.ProduceTimeout), fmt.Sprint(def.Kafka.ReplicationFactor, def.Kafka.ProduceTimeout)},
		{"http", cfg.HTTP, def.HTTP},
		{"clickhouse", cfg.ClickHouse, def.ClickHouse},
		{"telemetry", cfg.Telemetry, def.Telemetry},
		{"data_dir", cfg.DataDir, def.DataDir},
		{"presence limits", cfg.Streams["presence"].Limits, def.Streams["presence"].Limits},
		{"presence retention", cfg.Streams["presence"].Retention, def.Streams["presence"].Retention},
		{"kafka prefixes", cfg.Kafka.Naming(), def.Kafka.Naming()},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s from the example = %v, default %v", c.name, c.got, c.want)
		}
	}
}

// `driftguard config` prints the configuration in force, file and
// environment over the defaults, every secret redacted wherever it was
// set, and warns on stderr of a variable that looks like a typo.
func TestRunConfigPrintsTheConfigurationInForceRedacted(t *testing.T) {
	isolateEnv(t)
	fileSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a webhook secret kept in the file"))
	envSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a webhook secret from environment"))
	path := testenv.WriteConfig(t, "", `
clickhouse: {database: fromfile, password: password-in-the-file}
streams:
  orders: {signature: {secrets: [`+fileSecret+`]}}
`)
	bridgeSecret := "a-bridge-secret-from-the-environment-0123"
	t.Setenv("DRIFTGUARD_BRIDGE_SECRET", bridgeSecret)
	t.Setenv("DRIFTGUARD_SECRETS_PRESENCE", envSecret)
	t.Setenv("DRIFTGUARD_HTTP_ADDR", "127.0.0.1:18080")
	t.Setenv("DRIFTGUARD_KAFKA_BROKER", "127.0.0.1:1")

	r := runCLI(t, "config", "--config", path)
	if r.code != 0 {
		t.Fatalf("config: %v", r)
	}
	for _, secret := range []string{fileSecret, envSecret, "password-in-the-file", bridgeSecret} {
		if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
			t.Errorf("config shows the secret %q: %v", secret, r)
		}
	}
	for _, want := range []string{
		`password: "[redacted]"`, `secret: "[redacted]" # from DRIFTGUARD_BRIDGE_SECRET`,
		"database: fromfile", "addr: 127.0.0.1:18080 # from DRIFTGUARD_HTTP_ADDR",
		// The whole catalogue is in force, not only what the file names.
		"\n  chat:\n", "\n  workflow:\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config does not print %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, `"[redacted]"`); n != 4 {
		t.Errorf("%d values redacted, want 4 (two passwords and secrets, two streams' secrets):\n%s", n, r.stdout)
	}
	if want := "DRIFTGUARD_KAFKA_BROKER is not a driftguard variable; did you mean DRIFTGUARD_KAFKA_BROKERS?"; !strings.Contains(r.stderr, want) || strings.Contains(r.stdout, want) {
		t.Errorf("want the warning %q on stderr only: %v", want, r)
	}
}

// `driftguard --version` (and -version) is `driftguard version`.
func TestRunVersionFlag(t *testing.T) {
	want := runCLI(t, "version")
	if want.code != 0 || !strings.HasPrefix(want.stdout, "driftguard ") || strings.Count(want.stdout, "\n") != 1 {
		t.Fatalf("version: %v", want)
	}
	for _, flag := range []string{"--version", "-version"} {
		if r := runCLI(t, flag); r != want {
			t.Errorf("%s: %v, want %v", flag, r, want)
		}
	}
	// Anywhere else it is a flag no command has.
	if r := runCLI(t, "topics", "--version"); r.code != 2 {
		t.Errorf("topics --version: %v, want a usage error", r)
	}
}

func TestRunTopicsCreatesThenReportsOK(t *testing.T) {
	isolateEnv(t)
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(testenv.Fake(t), ","))

	first := runCLI(t, "topics")
	if first.code != 0 {
		t.Fatalf("first topics run: %v", first)
	}
	rows := topicTable(t, first.stdout)
	want := map[string]string{} // topic → cleanup policy and retention
	for _, stream := range []string{"presence", "workflow", "chat", "orders"} {
		for topic, policy := range map[string]string{".in": "delete 168h", "-table": "compact -", ".state": "compact -", ".outcomes": "delete 168h", ".dlq": "delete 336h"} {
			want[stream+topic] = policy
		}
	}
	// The topics only some policies use.
	want["workflow.replay"] = "delete 168h"
	want["chat.ephemeral"] = "delete 10m"
	checkTopicTable(t, "first run", rows, want, "created")

	second := runCLI(t, "topics")
	if second.code != 0 {
		t.Fatalf("second topics run: %v", second)
	}
	checkTopicTable(t, "second run", topicTable(t, second.stdout), want, "ok")

	// What was just created passes the check-only mode too.
	if check := runCLI(t, "topics", "--check"); check.code != 0 {
		t.Errorf("topics --check after creating: %v", check)
	}
}

// topicTable parses the TOPIC/PARTITIONS/CLEANUP/RETENTION/REPLICAS/MIN_ISR/STATUS
// table.
func topicTable(t *testing.T, out string) map[string][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "TOPIC PARTITIONS CLEANUP RETENTION REPLICAS MIN_ISR STATUS" {
		t.Fatalf("no table header in:\n%s", out)
	}
	rows := map[string][]string{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 7 {
			t.Fatalf("table row %q does not have 7 columns", line)
		}
		rows[f[0]] = f[1:]
	}
	return rows
}

func checkTopicTable(t *testing.T, what string, rows map[string][]string, want map[string]string, status string) {
	t.Helper()
	if len(rows) != len(want) {
		t.Errorf("%s: %d rows, want %d: %v", what, len(rows), len(want), rows)
	}
	for topic, cleanup := range want {
		// One replica, min.insync.replicas 1: the defaults, for one broker.
		got, wantRow := rows[topic], []string{"6", cleanup, "1", "1", status}
		if strings.Join(got, " ") != strings.Join(wantRow, " ") {
			t.Errorf("%s: %s row %v, want %v", what, topic, got, wantRow)
		}
	}
}

func TestRunTopicsCheckOnEmptyBrokerExits1(t *testing.T) {
	isolateEnv(t)
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(testenv.Fake(t), ","))

	r := runCLI(t, "topics", "--check")
	if r.code != 1 {
		t.Fatalf("want exit 1; got %v", r)
	}
	for _, topic := range []string{"presence.in", "presence-table", "presence.state", "presence.outcomes", "presence.dlq"} {
		if !strings.Contains(r.stderr, "topic "+topic+" is missing") {
			t.Errorf("stderr does not name the missing %s:\n%s", topic, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, "driftguard topics") {
		t.Errorf("stderr does not say how to create them:\n%s", r.stderr)
	}
	// --check must not have created anything.
	if again := runCLI(t, "topics", "--check"); again.code != 1 {
		t.Errorf("second topics --check: %v", again)
	}
}

func TestRunMigrateTwice(t *testing.T) {
	isolateEnv(t)
	addr := testenv.ClickHouse(t)
	database := testenv.UniqueName("dg_cli")
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", addr)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", database)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := sinkch.Open(ctx, config.ClickHouse{Addr: addr, Username: "default"})
		if err != nil {
			t.Errorf("dropping %s: %v", database, err)
			return
		}
		defer conn.Close()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+database); err != nil {
			t.Errorf("dropping %s: %v", database, err)
		}
	})
	migrations, err := sinkch.Migrations(config.ClickHouse{Database: database})
	if err != nil {
		t.Fatal(err)
	}

	first := runCLI(t, "migrate")
	if first.code != 0 {
		t.Fatalf("first migrate: %v", first)
	}
	for _, m := range migrations {
		if line := fmt.Sprintf("applied %04d_%s\n", m.Version, m.Name); !strings.Contains(first.stdout, line) {
			t.Errorf("first migrate does not report %q: %v", line, first)
		}
	}
	wantFirst := fmt.Sprintf("database %s is up to date (%d migrations applied now)", database, len(migrations))
	if !strings.Contains(first.stdout, wantFirst) {
		t.Errorf("first migrate: want %q; got %v", wantFirst, first)
	}

	second := runCLI(t, "migrate")
	wantSecond := fmt.Sprintf("database %s is up to date (0 migrations applied now)", database)
	if second.code != 0 || strings.TrimSpace(second.stdout) != wantSecond {
		t.Errorf("second migrate: want exit 0 and only %q; got %v", wantSecond, second)
	}
}

// `driftguard migrate` over TLS as a password user, configured from the
// environment as a Deployment would be (the password from a mounted
// Secret's file); a wrong password fails naming the setting.
func TestRunMigrateOverTLSWithAPasswordFile(t *testing.T) {
	isolateEnv(t)
	secure := testenv.ClickHouseSecure(t)
	secure.Database = testenv.UniqueName("dg_cli_tls")
	password := testenv.WriteFile(t, t.TempDir(), "password", secure.Password+"\n")
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", secure.Addr)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", secure.Database)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_USERNAME", secure.Username)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_TLS_CA_FILE", secure.TLS.CAFile)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_PASSWORD", "not-"+secure.Password)
	if r := runCLI(t, "migrate"); r.code != 1 || !strings.Contains(r.stderr, "clickhouse.password") {
		t.Errorf("with a wrong password: want exit 1 naming clickhouse.password; got %v", r)
	}
	t.Setenv("DRIFTGUARD_CLICKHOUSE_PASSWORD", "")
	t.Setenv("DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE", password)
	openDroppedAtEnd(t, testenv.Context(t, time.Minute), secure)
	r := runCLI(t, "migrate")
	if want := "database " + secure.Database + " is up to date"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("migrate: want exit 0 and %q; got %v", want, r)
	}
}

// migrate --print writes the statements Migrate would run, with the
// configured database, without reaching any server.
func TestRunMigratePrintNeedsNoServer(t *testing.T) {
	isolateEnv(t)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", "127.0.0.1:1")
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", "dg_print")
	r := runCLI(t, "migrate", "--print")
	if r.code != 0 {
		t.Fatalf("migrate --print: %v", r)
	}
	target := config.ClickHouse{Database: "dg_print"}
	want, err := sinkch.Bootstrap(target)
	if err != nil {
		t.Fatal(err)
	}
	migrations, err := sinkch.Migrations(target)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations {
		want = append(want, m.Statements...)
	}
	var got []string
	for _, part := range strings.Split(r.stdout, ";\n\n") {
		var lines []string
		for _, line := range strings.Split(part, "\n") {
			if !strings.HasPrefix(line, "-- ") {
				lines = append(lines, line)
			}
		}
		if stmt := strings.TrimSpace(strings.Join(lines, "\n")); stmt != "" {
			got = append(got, stmt)
		}
	}
	if strings.Join(got, "\n;\n") != strings.Join(want, "\n;\n") {
		t.Errorf("printed statements differ from the migrations':\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "dg_print.ordering_minute") {
		t.Errorf("the configured database is not substituted:\n%s", r.stdout)
	}
	t.Setenv("DRIFTGUARD_CLICKHOUSE_CLUSTER", "analytics")
	cluster := runCLI(t, "migrate", "--print")
	if cluster.code != 0 || !strings.Contains(cluster.stdout, "CREATE TABLE IF NOT EXISTS dg_print.events ON CLUSTER analytics") {
		t.Errorf("migrate --print with clickhouse.cluster: %v", cluster)
	}
}

// `driftguard token` prints a token the bridge accepts, for the user and
// streams asked, and refuses to run without the bridge's key.
func TestRunTokenSignsForTheBridge(t *testing.T) {
	isolateEnv(t)
	if r := runCLI(t, "token", "--user", "alice"); r.code != 1 || !strings.Contains(r.stderr, "bridge.secret") {
		t.Errorf("without a secret: %v", r)
	}
	if r := runCLI(t, "token"); r.code != 2 || !strings.Contains(r.stderr, "--user is required") {
		t.Errorf("without --user: %v", r)
	}
	secret := strings.Repeat("s", config.MinBridgeSecretBytes)
	t.Setenv("DRIFTGUARD_BRIDGE_SECRET", secret)
	r := runCLI(t, "token", "--user", "alice", "--streams", "presence, chat", "--ttl", "2m")
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	var claims struct {
		jwt.RegisteredClaims
		Streams []string `json:"streams"`
	}
	tok, err := jwt.ParseWithClaims(strings.TrimSpace(r.stdout), &claims, func(*jwt.Token) (any, error) { return []byte(secret), nil },
		jwt.WithValidMethods([]string{"HS256"}))
	if err != nil || !tok.Valid || claims.Subject != "alice" || !slices.Equal(claims.Streams, []string{"presence", "chat"}) {
		t.Fatalf("token %q: %v %+v", r.stdout, err, claims)
	}
	if left := time.Until(claims.ExpiresAt.Time); left <= time.Minute || left > 2*time.Minute {
		t.Errorf("the token expires in %s, want 2m", left)
	}
	// --kid signs with that key of bridge.tokens.hs256_keys and names it.
	rotated := strings.Repeat("r", config.MinBridgeSecretBytes)
	t.Setenv("DRIFTGUARD_BRIDGE_HS256_KEYS", "2026-12:"+rotated)
	if r := runCLI(t, "token", "--user", "alice", "--kid", "2027-01"); r.code != 1 || !strings.Contains(r.stderr, `no key with kid "2027-01"`) {
		t.Errorf("an unknown --kid: %v", r)
	}
	r = runCLI(t, "token", "--user", "alice", "--kid", "2026-12")
	tok, err = jwt.ParseWithClaims(strings.TrimSpace(r.stdout), &claims, func(*jwt.Token) (any, error) { return []byte(rotated), nil },
		jwt.WithValidMethods([]string{"HS256"}))
	if err != nil || !tok.Valid || tok.Header["kid"] != "2026-12" {
		t.Fatalf("--kid 2026-12: %v %v", r, err)
	}
}
