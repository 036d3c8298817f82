package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The environment overrides the file through `env` struct tags: a field
// tagged `env:"DRIFTGUARD_..."` is set from that variable, parsed by its type.
// A new setting needs only its tag; DRIFTGUARD_SECRETS_<STREAM> is the one
// variable not read this way, since its name depends on the catalogue.

// envPrefix is the prefix of every variable driftguard reads.
const envPrefix = "DRIFTGUARD_"

// streamSecretsPrefix starts the variable that sets a stream's
// signature.secrets: DRIFTGUARD_SECRETS_<STREAM>, the name in upper case.
const streamSecretsPrefix = envPrefix + "SECRETS_"

// SecretsVariable is the variable that sets stream's signature.secrets.
func SecretsVariable(stream string) string { return streamSecretsPrefix + strings.ToUpper(stream) }

// NonConfigVariables are the variables with the prefix that driftguard and
// its tests read besides the configuration's own, so that setting one is
// not warned about as a typo. DRIFTGUARD_TEST_* are the tests' (see
// TestVariablePrefix).
var NonConfigVariables = []string{
	"DRIFTGUARD_CONFIG",     // the config file, when --config is not given
	"DRIFTGUARD_FAULTS",     // the fault tests' depth (internal/testenv)
	"DRIFTGUARD_FAULT_SEED", // replays a fault test
	"DRIFTGUARD_CRASH_SEED", // replays a crash test
}

// TestVariablePrefix starts the variables of the tests and their scripts.
const TestVariablePrefix = envPrefix + "TEST_"

// EnvVariable is one variable the configuration reads, with the config
// path of the field it sets.
type EnvVariable struct {
	Name, Path string
	index      []int
	field      reflect.StructField
}

// envVariables are the variables of Config's `env` tags, in field order.
var envVariables = collectEnv(reflect.TypeFor[Config](), "", "", nil)

// envName is the variable of the setting at path, empty when none.
func envName(path string) string {
	for _, v := range envVariables {
		if v.Path == path {
			return v.Name
		}
	}
	return ""
}

// EnvVariables returns every variable the configuration reads through an
// `env` tag (DRIFTGUARD_SECRETS_<STREAM> aside), in the order of the fields.
func EnvVariables() []EnvVariable { return slices.Clone(envVariables) }

// collectEnv lists the variables of t's fields. A section type used in
// several places (TLS) tags its fields with the end of the name only, and
// each use names the start with an `envprefix` tag: under a field tagged
// `envprefix:"DRIFTGUARD_KAFKA_TLS_"`, the field tagged `env:"CA_FILE"` is
// set by DRIFTGUARD_KAFKA_TLS_CA_FILE.
func collectEnv(t reflect.Type, path, prefix string, index []int) []EnvVariable {
	var out []EnvVariable
	for i := range t.NumField() {
		f := t.Field(i)
		key, ok := yamlKey(f)
		if !ok {
			continue
		}
		at := append(slices.Clone(index), i)
		if name := f.Tag.Get("env"); name != "" {
			out = append(out, EnvVariable{Name: prefix + name, Path: join(path, key), index: at, field: f})
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		// Maps (the catalogue) are keyed by the file, not by the code.
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			out = append(out, collectEnv(ft, join(path, key), prefix+f.Tag.Get("envprefix"), at)...)
		}
	}
	return out
}

// applyEnv applies the DRIFTGUARD_* variables of environ: those of the
// `env` tags and the streams' secrets. A variable set to the empty string
// sets nothing, as if unset: the file's value or the default stays (an
// optional Secret that is missing must not blank the file's setting). A
// variable with the prefix that driftguard does not read is warned about,
// with the closest name it does read.
func (c *Config) applyEnv(environ []string) error {
	byName := map[string]EnvVariable{}
	for _, v := range envVariables {
		byName[v.Name] = v
	}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue
		}
		if v, ok := byName[name]; ok {
			if value == "" {
				continue
			}
			if err := v.set(c, value); err != nil {
				return err
			}
			c.setFromEnv(v.Path, name)
			continue
		}
		if stream, ok := strings.CutPrefix(name, streamSecretsPrefix); ok {
			s := c.Streams[strings.ToLower(stream)]
			if s == nil {
				return fmt.Errorf("config: %s names stream %q, which is not in the catalogue", name, strings.ToLower(stream))
			}
			if value == "" {
				continue
			}
			s.Signature.Secrets = SplitList(value)
			c.setFromEnv("streams."+s.Name+".signature.secrets", name)
			continue
		}
		if stream, ok := strings.CutPrefix(name, replaySecretPrefix); ok {
			s := c.Streams[strings.ToLower(stream)]
			if s == nil {
				return fmt.Errorf("config: %s names stream %q, which is not in the catalogue", name, strings.ToLower(stream))
			}
			if value != "" {
				s.Replay.Secret = value
				c.setFromEnv("streams."+s.Name+".replay.secret", name)
			}
			continue
		}
		if slices.Contains(NonConfigVariables, name) || strings.HasPrefix(name, TestVariablePrefix) {
			continue
		}
		c.Warnings = append(c.Warnings, c.unknownVariable(name))
	}
	return nil
}

// setFromEnv records that name set the key at path.
func (c *Config) setFromEnv(path, name string) {
	if c.fromEnv == nil {
		c.fromEnv = map[string]string{}
	}
	c.fromEnv[path] = name
}

// unknownVariable is the warning for a variable with the prefix that
// driftguard does not read, naming the closest one it does when one is
// close enough to be the one meant.
func (c *Config) unknownVariable(name string) string {
	candidates := slices.Clone(NonConfigVariables)
	for _, v := range envVariables {
		candidates = append(candidates, v.Name)
	}
	for _, s := range c.StreamNames() {
		candidates = append(candidates, SecretsVariable(s), ReplaySecretVariable(s))
	}
	best, bestDistance := "", -1
	for _, cand := range candidates {
		if d := editDistance(name, cand); bestDistance < 0 || d < bestDistance {
			best, bestDistance = cand, d
		}
	}
	msg := name + " is not a driftguard variable"
	// Past half the distinctive part (after the prefix) of the longer name
	// the two share too little for the suggestion to help.
	if bestDistance >= 0 && bestDistance <= max(2, (max(len(name), len(best))-len(envPrefix))/2) {
		msg += "; did you mean " + best + "?"
	}
	return msg
}

// editDistance is the Levenshtein distance of a and b (bytes: the names
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// set parses value by the field's type and stores it in the field of
// root, a pointer to the struct the variable was collected from.
func (v EnvVariable) set(root any, value string) error {
	field := reflect.ValueOf(root).Elem()
	for _, i := range v.index {
		if field.Kind() == reflect.Pointer {
			if field.IsNil() {
				field.Set(reflect.New(field.Type().Elem()))
			}
			field = field.Elem()
		}
		field = field.Field(i)
	}
	if err := parseInto(field, value); err != nil {
		if v.field.Tag.Get("redact") == "true" {
			// The error quotes the value: not a secret's.
			return fmt.Errorf("config: %s (%s): the value is not a %s", v.Name, v.Path, field.Type())
		}
		return fmt.Errorf("config: %s (%s): %w", v.Name, v.Path, err)
	}
	return nil
}

// parseInto sets field from value: strings as they are, lists as comma
// lists, numbers, durations (5s, 100ms) and booleans (true, false, 1, 0) as
// Go writes them.
func parseInto(field reflect.Value, value string) error {
	if field.Kind() == reflect.Pointer {
		elem := reflect.New(field.Type().Elem())
		if err := parseInto(elem.Elem(), value); err != nil {
			return err
		}
		field.Set(elem)
		return nil
	}
	if field.Type() == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(value)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 5s or 100ms", value)
		}
		field.SetInt(int64(d))
		return nil
	}
	switch field.Kind() {
	case reflect.String:
		field.SetString(value)
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%q is not true or false", value)
		}
		field.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(value, 10, field.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not a whole number", value)
		}
		field.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(value, 10, field.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not a whole number of 0 or more", value)
		}
		field.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(value, field.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not a number", value)
		}
		field.SetFloat(f)
	case reflect.Slice:
		parts := SplitList(value)
		list := reflect.MakeSlice(field.Type(), len(parts), len(parts))
		for i, p := range parts {
			if err := parseInto(list.Index(i), p); err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
		}
		field.Set(list)
	default:
		// Caught by the tests, which set every tagged field.
		return fmt.Errorf("a %s cannot be set from the environment", field.Type())
	}
	return nil
}

// SplitList splits a comma-separated list, a variable's or a flag's,
// dropping spaces around items and empty items.
func SplitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
