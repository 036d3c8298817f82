package config_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A DRIFTGUARD_* variable driftguard does not read is warned about, with
// the name meant when one is close; those it reads are not.
func TestLoadWarnsOfUnknownVariables(t *testing.T) {
	cases := []struct {
		variable string
		// warning is the whole warning; empty: none.
		warning string
	}{
		{"DRIFTGUARD_KAFKA_BROKER", "DRIFTGUARD_KAFKA_BROKER is not a driftguard variable; did you mean DRIFTGUARD_KAFKA_BROKERS?"},
		{"DRIFTGUARD_CLICKHOUSE_PASWORD", "DRIFTGUARD_CLICKHOUSE_PASWORD is not a driftguard variable; did you mean DRIFTGUARD_CLICKHOUSE_PASSWORD?"},
		{"DRIFTGUARD_SECRET_PRESENCE", "DRIFTGUARD_SECRET_PRESENCE is not a driftguard variable; did you mean DRIFTGUARD_SECRETS_PRESENCE?"},
		{"DRIFTGUARD_CONFIG_FILE", "DRIFTGUARD_CONFIG_FILE is not a driftguard variable; did you mean DRIFTGUARD_CONFIG?"},
		{"DRIFTGUARD_LOGLEVEL", "DRIFTGUARD_LOGLEVEL is not a driftguard variable; did you mean DRIFTGUARD_LOG_LEVEL?"},
		// Nothing is close: no suggestion rather than a misleading one.
		{"DRIFTGUARD_ZEPPELIN_MODE", "DRIFTGUARD_ZEPPELIN_MODE is not a driftguard variable"},
		// Read, by the configuration, the command line or the tests.
		{"DRIFTGUARD_KAFKA_BROKERS", ""},
		{"DRIFTGUARD_CONFIG", ""},
		{"DRIFTGUARD_FAULT_SEED", ""},
		{"DRIFTGUARD_TEST_ANYTHING", ""},
		{"DRIFTGUARD_SECRETS_PRESENCE", ""},
		// Not ours at all.
		{"KAFKA_BROKERS", ""},
	}
	for _, tc := range cases {
		t.Run(tc.variable, func(t *testing.T) {
			value := "127.0.0.1:9092"
			if strings.Contains(tc.variable, "SECRETS") {
				value = validSecret
			}
			if tc.variable == "DRIFTGUARD_CONFIG" {
				value = "/not/read/by/load.yaml"
			}
			cfg := mustLoad(t, "", []string{tc.variable + "=" + value})
			switch {
			case tc.warning == "" && len(cfg.Warnings) > 0:
				t.Errorf("warnings %q, want none", cfg.Warnings)
			case tc.warning != "" && (len(cfg.Warnings) != 1 || cfg.Warnings[0] != tc.warning):
				t.Errorf("warnings %q, want %q", cfg.Warnings, tc.warning)
			}
		})
	}
}

// Every variable listed as read outside the configuration is read by some
// code: the list is not a place to hide a typo's warning.
func TestNonConfigVariablesAreNotConfigVariables(t *testing.T) {
	for _, v := range config.EnvVariables() {
		for _, other := range config.NonConfigVariables {
			if v.Name == other {
				t.Errorf("%s is both a config variable (%s) and listed as not one", v.Name, v.Path)
			}
		}
	}
}

// A value that does not parse is refused naming the variable and its key.
// The tagged fields of today are strings, so this goes through the
// mechanism's own test struct too (env_internal_test.go); here, a list
// whose items the configuration then checks.
func TestLoadEnvironmentListIsValidatedWithItsPath(t *testing.T) {
	_, err := config.Load("", []string{"DRIFTGUARD_KAFKA_BROKERS=a:1, no-port"})
	if err == nil || !strings.Contains(err.Error(), "in kafka.brokers[1]") {
		t.Errorf("error %v, want one naming kafka.brokers[1]", err)
	}
}

// secretConfig loads a configuration with every kind of secret set, some
// through the file and some through the environment, and returns them.
func secretConfig(t *testing.T) (*config.Config, []string) {
	t.Helper()
	fileSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret written in the file 0123"))
	path := testenv.WriteConfig(t, "", `
clickhouse: {password: file-password-0123456789}
streams:
  orders:
    signature: {secrets: [`+fileSecret+`]}
`)
	bridge := "bridge-secret-from-env-0123456789abcdef"
	cfg := mustLoad(t, path, []string{
		"DRIFTGUARD_BRIDGE_SECRET=" + bridge,
		"DRIFTGUARD_SECRETS_PRESENCE=" + validSecret + "," + otherValidSecret,
	})
	return cfg, []string{"file-password-0123456789", fileSecret, bridge, validSecret, otherValidSecret}
}

// `driftguard config` shows each secret set as [redacted], from the file
// and from the environment alike, and no secret anywhere.
func TestEffectiveYAMLRedactsSecrets(t *testing.T) {
	cfg, secrets := secretConfig(t)
	out, err := cfg.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("the effective configuration shows the secret %q:\n%s", s, text)
		}
	}
	for _, want := range []string{
		`password: "[redacted]"`,
		`secret: "[redacted]" # from DRIFTGUARD_BRIDGE_SECRET`,
		"secrets: # from DRIFTGUARD_SECRETS_PRESENCE\n        - \"[redacted]\"\n        - \"[redacted]\"\n",
		"secrets:\n        - \"[redacted]\"\n",
		// Unset: empty, not redacted.
		"secrets: []",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the effective configuration lacks %q:\n%s", want, text)
		}
	}
}

// Formatting or logging the configuration, or a part holding a secret,
// never shows the secret.
func TestFormattingAndLoggingRedactSecrets(t *testing.T) {
	cfg, secrets := secretConfig(t)
	presence := cfg.Streams["presence"]
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		slog.New(h).Info("loaded", "config", cfg, "clickhouse", cfg.ClickHouse, "bridge", cfg.Bridge,
			"stream", presence, "signature", presence.Signature)
	}
	outputs := map[string]string{
		"log":               logs.String(),
		"%v of *Config":     fmt.Sprintf("%v", cfg),
		"%+v of Config":     fmt.Sprintf("%+v", *cfg),
		"%s of ClickHouse":  fmt.Sprintf("%s", cfg.ClickHouse),
		"%v of Bridge":      fmt.Sprint(cfg.Bridge),
		"%+v of a Stream":   fmt.Sprintf("%+v", presence),
		"%v of streams":     fmt.Sprint(cfg.Streams),
		"%v of a Signature": fmt.Sprint(presence.Signature),
	}
	for name, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the secret %q:\n%s", name, s, out)
			}
		}
		if !strings.Contains(out, config.Redacted) {
			t.Errorf("%s does not say %s:\n%s", name, config.Redacted, out)
		}
	}
}

// What `driftguard config` prints is the configuration in force: loaded as
// a file, it configures the same again.
func TestEffectiveYAMLLoadsAsTheSameConfiguration(t *testing.T) {
	first := mustLoad(t, testenv.WriteConfig(t, "", `
kafka: {replication_factor: 3}
http: {max_per_source: 8}
streams:
  presence: {limits: {partitions: 12}}
`), []string{"DRIFTGUARD_CLICKHOUSE_DATABASE=fromenv", "DRIFTGUARD_KAFKA_BROKERS=k1:9092,k2:9092"})
	out, err := first.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	second := mustLoad(t, testenv.WriteConfig(t, "", string(out)), nil)
	if len(second.Warnings) > 0 {
		t.Errorf("the effective configuration has unknown keys: %q", second.Warnings)
	}
	again, err := second.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	// Only the comments naming the variables differ.
	stripped := regexpFromEnv.ReplaceAllString(string(out), "")
	if stripped != string(again) {
		t.Errorf("loaded again, the configuration differs:\nfirst:\n%s\nagain:\n%s", stripped, again)
	}
	for _, want := range []string{"replication_factor: 3", "min_insync_replicas: 2", "max_per_source: 8", "partitions: 12",
		"database: fromenv # from DRIFTGUARD_CLICKHOUSE_DATABASE", "brokers: # from DRIFTGUARD_KAFKA_BROKERS\n    - k1:9092\n    - k2:9092\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the effective configuration lacks %q", want)
		}
	}
}

var regexpFromEnv = regexp.MustCompile(` # from DRIFTGUARD_[A-Z_]+`)

// An empty variable sets nothing: the file's value stays.
func TestLoadEmptyVariableKeepsTheFile(t *testing.T) {
	path := testenv.WriteConfig(t, "", `
kafka: {brokers: [file:9092]}
clickhouse: {database: fromfile}
streams:
  presence: {signature: {secrets: [`+validSecret+`]}}
`)
	cfg := mustLoad(t, path, []string{"DRIFTGUARD_KAFKA_BROKERS=", "DRIFTGUARD_CLICKHOUSE_DATABASE=", "DRIFTGUARD_SECRETS_PRESENCE="})
	checkFields(t, []field{
		{"kafka.brokers", cfg.Kafka.Brokers, []string{"file:9092"}},
		{"clickhouse.database", cfg.ClickHouse.Database, "fromfile"},
		{"presence secrets", cfg.Streams["presence"].Signature.Secrets, []string{validSecret}},
	})
	if len(cfg.Warnings) > 0 {
		t.Errorf("warnings %q, want none", cfg.Warnings)
	}
}

// variableName is a DRIFTGUARD_* name as code, scripts and the chart write
// it; one ending in _ (or followed by * or <) is a prefix, not a name.
var variableName = regexp.MustCompile(`DRIFTGUARD_[A-Z0-9_]*[*<]?`)

// Every DRIFTGUARD_* variable that the code, the scripts, the Taskfile or
// the chart read or set is one driftguard knows: a variable of the
// configuration (an `env` tag), a stream's secrets, a test's, or one of
// NonConfigVariables. Otherwise setting it would warn as a typo, or, set
// by the chart, configure nothing.
func TestEveryVariableInTheTreeIsKnown(t *testing.T) {
	known := map[string]bool{}
	for _, v := range config.EnvVariables() {
		known[v.Name] = true
	}
	for _, name := range config.NonConfigVariables {
		known[name] = true
	}
	root := filepath.Join("..", "..")
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == ".git" || name == "node_modules" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		// Tests name unknown variables on purpose.
		if strings.HasSuffix(name, "_test.go") || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".sh") ||
			strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".tpl") || name == "Containerfile") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range variableName.FindAllString(string(data), -1) {
			found++
			switch {
			case strings.HasSuffix(v, "_"), strings.HasSuffix(v, "*"), strings.HasSuffix(v, "<"):
			case known[v], strings.HasPrefix(v, config.TestVariablePrefix), strings.HasPrefix(v, "DRIFTGUARD_SECRETS_"):
			default:
				t.Errorf("%s: %s is neither a config variable (an `env` tag of config.Config) nor in config.NonConfigVariables", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no DRIFTGUARD_* variable found in the tree")
	}
}
