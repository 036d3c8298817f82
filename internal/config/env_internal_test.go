package config

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

// envKinds has a field of every type the environment can set, nested as
// the configuration nests them.
type envKinds struct {
	S   string          `yaml:"s" env:"DRIFTGUARD_K_S"`
	L   []string        `yaml:"l" env:"DRIFTGUARD_K_L"`
	I   int             `yaml:"i" env:"DRIFTGUARD_K_I"`
	I6  int64           `yaml:"i6" env:"DRIFTGUARD_K_I6"`
	U   uint16          `yaml:"u" env:"DRIFTGUARD_K_U"`
	F   float64         `yaml:"f" env:"DRIFTGUARD_K_F"`
	D   time.Duration   `yaml:"d" env:"DRIFTGUARD_K_D"`
	B   bool            `yaml:"b" env:"DRIFTGUARD_K_B"`
	PB  *bool           `yaml:"pb" env:"DRIFTGUARD_K_PB"`
	DL  []time.Duration `yaml:"dl" env:"DRIFTGUARD_K_DL"`
	P   policyAlias     `yaml:"p" env:"DRIFTGUARD_K_P"`
	Pin int             `yaml:"pin" env:"DRIFTGUARD_K_PIN" redact:"true"`
	N   struct {
		S string `yaml:"s" env:"DRIFTGUARD_K_N_S"`
	} `yaml:"nested"`
	PN *struct {
		I int `yaml:"i" env:"DRIFTGUARD_K_PN_I"`
	} `yaml:"pointed"`
	Untagged string            `yaml:"untagged"`
	M        map[string]string `yaml:"m"`
}

type policyAlias Policy

func TestEnvSetsEveryKind(t *testing.T) {
	vars := collectEnv(reflect.TypeFor[envKinds](), "", "", nil)
	values := map[string]string{
		"DRIFTGUARD_K_S": "text", "DRIFTGUARD_K_L": " a, b,,c ", "DRIFTGUARD_K_I": "-7", "DRIFTGUARD_K_I6": "9000000000",
		"DRIFTGUARD_K_U": "65535", "DRIFTGUARD_K_F": "1.5", "DRIFTGUARD_K_D": "1m30s", "DRIFTGUARD_K_B": "true",
		"DRIFTGUARD_K_PB": "false", "DRIFTGUARD_K_DL": "1s,2ms", "DRIFTGUARD_K_P": "gapless",
		"DRIFTGUARD_K_N_S": "inner", "DRIFTGUARD_K_PN_I": "3", "DRIFTGUARD_K_PIN": "1234",
	}
	paths := map[string]string{}
	var got envKinds
	for _, v := range vars {
		paths[v.Name] = v.Path
		if err := v.set(&got, values[v.Name]); err != nil {
			t.Fatalf("%s=%s: %v", v.Name, values[v.Name], err)
		}
	}
	if len(vars) != len(values) {
		t.Errorf("collected %d variables, want %d: %v", len(vars), len(values), paths)
	}
	for name, path := range map[string]string{"DRIFTGUARD_K_S": "s", "DRIFTGUARD_K_N_S": "nested.s", "DRIFTGUARD_K_PN_I": "pointed.i"} {
		if paths[name] != path {
			t.Errorf("%s sets %q, want %q", name, paths[name], path)
		}
	}
	f := false
	want := envKinds{S: "text", L: []string{"a", "b", "c"}, I: -7, I6: 9_000_000_000, U: 65535, F: 1.5, D: 90 * time.Second,
		B: true, PB: &f, DL: []time.Duration{time.Second, 2 * time.Millisecond}, P: "gapless", Pin: 1234}
	want.N.S = "inner"
	want.PN = &struct {
		I int `yaml:"i" env:"DRIFTGUARD_K_PN_I"`
	}{I: 3}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestEnvRefusesWhatDoesNotParseNamingVariableAndPath(t *testing.T) {
	bad := map[string]string{
		"DRIFTGUARD_K_I": "seven", "DRIFTGUARD_K_I6": "1.5", "DRIFTGUARD_K_U": "-1", "DRIFTGUARD_K_F": "x",
		"DRIFTGUARD_K_D": "90", "DRIFTGUARD_K_B": "yes please", "DRIFTGUARD_K_PB": "maybe", "DRIFTGUARD_K_DL": "1s,soon",
		"DRIFTGUARD_K_PN_I": "3x",
	}
	for _, v := range collectEnv(reflect.TypeFor[envKinds](), "", "", nil) {
		value, ok := bad[v.Name]
		if !ok {
			continue
		}
		delete(bad, v.Name)
		var got envKinds
		err := v.set(&got, value)
		if err == nil || !strings.Contains(err.Error(), v.Name+" ("+v.Path+")") || !strings.Contains(err.Error(), fmt.Sprintf("%q", value[strings.LastIndex(value, ",")+1:])) {
			t.Errorf("%s=%s: error %v, want one naming the variable, %s and the value", v.Name, value, err, v.Path)
		}
	}
	if len(bad) > 0 {
		t.Errorf("not collected: %v", bad)
	}
	// A secret's value is not quoted back.
	for _, v := range collectEnv(reflect.TypeFor[envKinds](), "", "", nil) {
		if v.Name != "DRIFTGUARD_K_PIN" {
			continue
		}
		var got envKinds
		if err := v.set(&got, "hunter2"); err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "DRIFTGUARD_K_PIN (pin)") {
			t.Errorf("DRIFTGUARD_K_PIN=hunter2: error %v, want one naming the variable and its key, not the value", err)
		}
	}
}

// Every variable of the configuration sets the key its path names: the
// value set shows at that path in `driftguard config`, commented with the
// variable.
func TestEnvVariablesOfConfigSetTheirPaths(t *testing.T) {
	if len(envVariables) == 0 {
		t.Fatal("Config has no env tags")
	}
	seen := map[string]bool{}
	for _, v := range envVariables {
		if seen[v.Name] {
			t.Errorf("%s tags two fields", v.Name)
		}
		seen[v.Name] = true
		if !strings.HasPrefix(v.Name, envPrefix) || strings.HasPrefix(v.Name, streamSecretsPrefix) || strings.HasPrefix(v.Name, TestVariablePrefix) {
			t.Errorf("%s: a config variable must start with %s, and not %s or %s", v.Name, envPrefix, streamSecretsPrefix, TestVariablePrefix)
		}
		value := sampleValue(t, v.field.Type)
		c, err := catalogue()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.applyEnv([]string{v.Name + "=" + value}); err != nil {
			t.Fatalf("%s=%s: %v", v.Name, value, err)
		}
		if len(c.Warnings) > 0 {
			t.Errorf("%s warned: %q", v.Name, c.Warnings)
		}
		out, err := c.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		leaf := v.Path[strings.LastIndex(v.Path, ".")+1:]
		if !strings.Contains(string(out), leaf+":") || !strings.Contains(string(out), "# from "+v.Name+"\n") {
			t.Errorf("%s=%s: `driftguard config` does not show %s set from it:\n%s", v.Name, value, v.Path, out)
		}
		if v.field.Tag.Get("redact") != "true" && !strings.Contains(string(out), value) {
			t.Errorf("%s=%s: the value is not in `driftguard config`", v.Name, value)
		}
	}
}

// sampleValue is a value of type t that differs from its zero value.
func sampleValue(t *testing.T, typ reflect.Type) string {
	t.Helper()
	if typ == reflect.TypeFor[time.Duration]() {
		return "17s"
	}
	switch typ.Kind() {
	case reflect.Pointer:
		return sampleValue(t, typ.Elem())
	case reflect.String, reflect.Slice:
		// Every list of the configuration is of strings; an address
		// passes every check.
		return "sample.example:1717"
	case reflect.Bool:
		return "true"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "17"
	}
	t.Fatalf("no sample value for a %s", typ)
	return ""
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3},
		{"DRIFTGUARD_KAFKA_BROKER", "DRIFTGUARD_KAFKA_BROKERS", 1}, {"flaw", "lawn", 2},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

// A struct of the configuration that holds a secret, itself or in a field,
// formats and logs it redacted: a new one needs String and LogValue too.
func TestStructsWithSecretsFormatRedacted(t *testing.T) {
	stringer := reflect.TypeFor[fmt.Stringer]()
	valuer := reflect.TypeFor[slog.LogValuer]()
	var visit func(t reflect.Type, path string, seen map[reflect.Type]bool) bool
	visit = func(typ reflect.Type, path string, seen map[reflect.Type]bool) bool {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Map || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return false
		}
		seen[typ] = true
		holds := false
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, ok := yamlKey(f)
			if !ok {
				continue
			}
			if f.Tag.Get("redact") == "true" || visit(f.Type, join(path, key), seen) {
				holds = true
			}
		}
		if holds && !(typ.Implements(stringer) && typ.Implements(valuer)) {
			t.Errorf("%s (%s) holds a secret but has no String and LogValue that redact it", typ, path)
		}
		return holds
	}
	if !visit(reflect.TypeFor[Config](), "", map[reflect.Type]bool{}) {
		t.Fatal("no field of Config is tagged redact")
	}
}
