package config

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Redacted is what `driftguard config`, String and LogValue show of a set
// secret: a field tagged `redact:"true"`.
const Redacted = "[redacted]"

// EffectiveYAML is the configuration in force as YAML, for `driftguard
// config`: every key, the defaults and the whole catalogue included, each
// secret set shown as Redacted, and each key the environment set commented
// with its variable.
func (c *Config) EffectiveYAML() ([]byte, error) {
	effective := *c
	// Defaults that follow other keys, and so are not filled in.
	effective.Kafka.MinInsyncReplicas = c.Kafka.MinInsyncReplicasOrDefault()
	node, err := redactedNode(&effective, c.fromEnv)
	if err != nil {
		return nil, err
	}
	if len(c.Kafka.Brokers) == 0 {
		comment(node, "kafka.brokers", "empty: "+strings.Join(c.BrokersOrDefault(), ",")+", or in dev the embedded broker")
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// comment sets the line comment of the key at path in the mapping n.
func comment(n *yaml.Node, path, text string) {
	head, rest, nested := strings.Cut(path, ".")
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != head {
			continue
		}
		if nested {
			comment(n.Content[i+1], rest, text)
		} else {
			lineComment(n.Content[i], n.Content[i+1], text)
		}
	}
}

// String shows the configuration as EffectiveYAML does, so that formatting
// a Config (%v, a log line) cannot reveal a secret.
func (c Config) String() string { return redactedString(&c) }

// LogValue logs the configuration with its secrets redacted.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// String shows the settings, any secret among them (SASL's) redacted.
func (k Kafka) String() string { return redactedString(k) }

// LogValue logs the settings, any secret among them redacted.
func (k Kafka) LogValue() slog.Value { return slog.StringValue(k.String()) }

// String shows the settings, any secret among them (Pyroscope's) redacted.
func (t Telemetry) String() string { return redactedString(t) }

// LogValue logs the settings, any secret among them redacted.
func (t Telemetry) LogValue() slog.Value { return slog.StringValue(t.String()) }

// String shows the settings, the password redacted.
func (c ClickHouse) String() string { return redactedString(c) }

// LogValue logs the settings, the password redacted.
func (c ClickHouse) LogValue() slog.Value { return slog.StringValue(c.String()) }

// String shows the settings, the secret redacted.
func (b Bridge) String() string { return redactedString(b) }

// LogValue logs the settings, the secret redacted.
func (b Bridge) LogValue() slog.Value { return slog.StringValue(b.String()) }

// String shows the settings, the HS256 keys redacted.
func (t BridgeTokens) String() string { return redactedString(t) }

// LogValue logs the settings, the HS256 keys redacted.
func (t BridgeTokens) LogValue() slog.Value { return slog.StringValue(t.String()) }

// String shows the entry, its secrets redacted.
func (s Stream) String() string { return redactedString(s) }

// LogValue logs the entry, its secrets redacted.
func (s Stream) LogValue() slog.Value { return slog.StringValue(s.String()) }

// String shows the scheme and tolerance, the secrets redacted.
func (s Signature) String() string { return redactedString(s) }

// LogValue logs the scheme and tolerance, the secrets redacted.
func (s Signature) LogValue() slog.Value { return slog.StringValue(s.String()) }

// redactedString is v as one line of YAML (flow style), secrets redacted.
func redactedString(v any) string {
	node, err := redactedNode(v, nil)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	flow(node)
	out, err := yaml.Marshal(node)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSpace(string(out))
}

func flow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flow(c)
	}
}

// redactedNode encodes v and replaces the value of every field tagged
// `redact:"true"` that is set; fromEnv comments the keys at those paths.
func redactedNode(v any, fromEnv map[string]string) (*yaml.Node, error) {
	var node yaml.Node
	if err := node.Encode(v); err != nil {
		return nil, err
	}
	redactNode(&node, reflect.TypeOf(v), "", fromEnv)
	return &node, nil
}

func redactNode(n *yaml.Node, t reflect.Type, path string, fromEnv map[string]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		p := join(path, key.Value)
		switch t.Kind() {
		case reflect.Map:
			redactNode(value, t.Elem(), p, fromEnv)
		case reflect.Struct:
			f, ok := fieldByKey(t, key.Value)
			switch {
			case !ok:
			case f.Tag.Get("redact") == "true":
				redactValue(value)
			default:
				redactNode(value, f.Type, p, fromEnv)
			}
		}
		// After the redaction, which replaces the value.
		if name := fromEnv[p]; name != "" {
			lineComment(key, value, "from "+name)
		}
	}
}

// redactValue replaces a set secret, or each of a list of them (how many
// there are helps when rotating); an unset one stays empty.
func redactValue(n *yaml.Node) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "" && n.Tag != "!!null" {
			*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted, Style: yaml.DoubleQuotedStyle}
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			redactValue(item)
		}
	default:
		if len(n.Content) > 0 {
			*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted, Style: yaml.DoubleQuotedStyle}
		}
	}
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if k, ok := yamlKey(f); ok && k == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// lineComment comments a key: at the end of its value's line when the
// value is on the key's line (a scalar, an empty list or mapping), where
// the encoder would otherwise move a key's comment to the next line.
func lineComment(key, value *yaml.Node, text string) {
	if value.Kind == yaml.ScalarNode || len(value.Content) == 0 {
		value.LineComment = text
		return
	}
	key.LineComment = text
}
