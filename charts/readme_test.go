package charts

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chartutil"
)

// update rewrites the values table of the chart's README from the schema:
// `go test -run TestReadmeValuesTable -update` in charts/.
var update = flag.Bool("update", false, "rewrite charts/driftguard/README.md's values table from values.schema.json")

const (
	readmeFile  = "driftguard/README.md"
	tableStart  = "<!-- values table: generated from values.schema.json by `go test -run TestReadmeValuesTable -update` in charts/ -->"
	tableEnd    = "<!-- end of the values table -->"
	schemaFile  = "driftguard/values.schema.json"
	defaultsDoc = "driftguard/values.yaml"
)

// schemaNode is the part of a JSON Schema the table reads.
type schemaNode struct {
	Ref         string                 `json:"$ref"`
	Type        any                    `json:"type"`
	Enum        []any                  `json:"enum"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	Items       *schemaNode            `json:"items"`
	Minimum     *float64               `json:"minimum"`
	Pattern     string                 `json:"pattern"`
}

// The README's values table is the schema's: one row per value (a path
// to an object with properties of its own is a heading of rows, not a
// row), its type, its default from values.yaml and the schema's
// description. It fails when the README differs from what the schema
// gives, so the table never drifts from what `helm install` accepts.
func TestReadmeValuesTable(t *testing.T) {
	table := valuesTable(t)
	data, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	start, end := strings.Index(readme, tableStart), strings.Index(readme, tableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s lacks the markers of the values table:\n%s\n%s", readmeFile, tableStart, tableEnd)
	}
	want := readme[:start+len(tableStart)] + "\n\n" + table + "\n" + readme[end:]
	if want == readme {
		return
	}
	if *update {
		if err := os.WriteFile(readmeFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the values table differs from values.schema.json; run `go test -run TestReadmeValuesTable -update` in charts/", readmeFile)
}

// valuesTable renders the table.
func valuesTable(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		schemaNode
		Definitions map[string]*schemaNode `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	defaults, err := chartutil.ReadValuesFile(defaultsDoc)
	if err != nil {
		t.Fatal(err)
	}
	orders := keyOrders(t)
	resolve := func(n *schemaNode) *schemaNode {
		if name, ok := strings.CutPrefix(n.Ref, "#/definitions/"); ok {
			def := root.Definitions[name]
			if def == nil {
				t.Fatalf("%s: no definition %s", schemaFile, name)
			}
			// The reference's own description wins over the definition's.
			out := *def
			if n.Description != "" {
				out.Description = n.Description
			}
			return &out
		}
		return n
	}
	var b strings.Builder
	b.WriteString("| value | type | default | description |\n|---|---|---|---|\n")
	var walk func(path string, n *schemaNode)
	walk = func(path string, n *schemaNode) {
		n = resolve(n)
		// An object whose description says it all is one row (a Secret
		// reference, resources); one whose properties have their own
		// descriptions is a heading of their rows.
		if len(n.Properties) > 0 && (n.Description == "" || describesProperties(n, resolve)) {
			if n.Description != "" {
				fmt.Fprintf(&b, "| `%s` | object | | %s |\n", path, cell(n.Description))
			}
			for _, key := range propertyOrder(orders, path, n) {
				walk(strings.TrimPrefix(path+"."+key, "."), n.Properties[key])
			}
			return
		}
		def, ok := lookup(defaults, path)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", path, typeOf(n), defaultText(def, ok), cell(n.Description))
	}
	walk("", &root.schemaNode)
	return b.String()
}

// propertyOrder orders an object's keys as values.yaml does (a decoded
// schema has no order), then those values.yaml lacks, sorted.
func propertyOrder(orders map[string][]string, path string, n *schemaNode) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range orders[path] {
		if n.Properties[k] != nil && !seen[k] {
			out = append(out, k)
			seen[k] = true
		}
	}
	var rest []string
	for k := range n.Properties {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// keyOrders are the keys of every mapping of values.yaml, in order, by
// their dotted path ("" for the top).
func keyOrders(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(defaultsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
			walk(path, n.Content[0])
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			out[path] = append(out[path], key)
			walk(strings.TrimPrefix(path+"."+key, "."), n.Content[i+1])
		}
	}
	walk("", &doc)
	return out
}

// describesProperties reports whether some property of n has a
// description.
func describesProperties(n *schemaNode, resolve func(*schemaNode) *schemaNode) bool {
	for _, p := range n.Properties {
		if resolve(p).Description != "" {
			return true
		}
	}
	return false
}

// lookup is the value at a dotted path of values, maps included.
func lookup(values map[string]any, path string) (any, bool) {
	var cur any = values
	for _, key := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			if v, isValues := cur.(chartutil.Values); isValues {
				m = v
			} else {
				return nil, false
			}
		}
		if cur, ok = m[key]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func typeOf(n *schemaNode) string {
	if len(n.Enum) > 0 {
		var vals []string
		for _, v := range n.Enum {
			data, _ := json.Marshal(v)
			vals = append(vals, string(data))
		}
		return "one of " + cell(strings.Join(vals, ", "))
	}
	switch ty := n.Type.(type) {
	case string:
		if ty == "array" && n.Items != nil {
			if it, ok := n.Items.Type.(string); ok {
				return "array of " + it
			}
		}
		return ty
	case []any:
		var parts []string
		for _, p := range ty {
			parts = append(parts, fmt.Sprint(p))
		}
		return strings.Join(parts, " or ")
	}
	if n.Ref != "" || len(n.Properties) > 0 {
		return "object"
	}
	return "any"
}

func defaultText(v any, ok bool) string {
	if !ok {
		return ""
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return "`" + cell(strings.TrimSpace(buf.String())) + "`"
}

// cell escapes what would end a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
