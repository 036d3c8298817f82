package config

import (
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// unknownKeys lists the config paths in node that match no field of target,
// so a typo such as `partitons:` is reported instead of silently ignored.
func unknownKeys(node *yaml.Node, target any, path string) []string {
	return walkUnknown(node, reflect.TypeOf(target), path)
}

func walkUnknown(node *yaml.Node, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind != yaml.MappingNode {
		return nil
	}
	var out []string
	switch t.Kind() {
	case reflect.Map:
		for i := 0; i+1 < len(node.Content); i += 2 {
			out = append(out, walkUnknown(node.Content[i+1], t.Elem(), join(path, node.Content[i].Value))...)
		}
	case reflect.Struct:
		fields := YAMLFields(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			key := node.Content[i].Value
			p := join(path, key)
			ft, ok := fields[key]
			if !ok {
				out = append(out, p)
				continue
			}
			out = append(out, walkUnknown(node.Content[i+1], ft, p)...)
		}
	}
	return out
}

// YAMLFields maps each key a config file may set on a struct of type t to
// its field's type: the field's yaml tag or, as yaml.v3 reads a field
// without one, its name in lower case. Besides the unknown-key check, the
// docs test reads the config paths the documentation may name from it.
func YAMLFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, ok := yamlKey(f); ok {
			fields[name] = f.Type
		}
	}
	return fields
}

// yamlKey is the key a config file sets f with, if any.
func yamlKey(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return "", false
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
