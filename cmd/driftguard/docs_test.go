package main

// The README and every docs/*.md page, held to the code: their links and
// file paths, metric names, config paths, the outcome and reason tables,
// DRIFTGUARD_* variables, and the YAML and JSON examples. A page naming
// something the code lacks fails here with the page and the token, and so
// does a metric or config key the code has and no page names. This package
// is the composition root, the only one that may build every component's
// metrics.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/relay"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// repoRoot is the module's folder, seen from this package's.
const repoRoot = "../.."

// docPage is one markdown page.
type docPage struct {
	// name is the page's path from the repository root: "README.md",
	// "docs/ingest.md".
	name string
	// text is the whole page, prose the page without its fenced blocks.
	text, prose string
	blocks      []fencedBlock
}

// fencedBlock is a fenced code block of a page.
type fencedBlock struct {
	lang, body string
	// caption is the last prose line before the block that is not blank.
	caption string
	line    int
}

// docPages reads README.md and every docs/*.md page.
func docPages(t *testing.T) []docPage {
	t.Helper()
	names := []string{"README.md"}
	found, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(found) == 0 {
		t.Fatalf("no docs/*.md pages found: %v", err)
	}
	for _, f := range found {
		names = append(names, "docs/"+filepath.Base(f))
	}
	pages := make([]docPage, len(names))
	for i, name := range names {
		data, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Fatal(err)
		}
		pages[i] = parsePage(name, string(data))
	}
	return pages
}

func parsePage(name, text string) docPage {
	p := docPage{name: name, text: text}
	var prose, body []string
	var open *fencedBlock
	caption := ""
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```") && open == nil:
			open = &fencedBlock{lang: strings.TrimSpace(line[3:]), caption: caption, line: i + 1}
			body = nil
		case strings.HasPrefix(line, "```"):
			open.body = strings.Join(body, "\n") + "\n"
			p.blocks = append(p.blocks, *open)
			open = nil
		case open != nil:
			body = append(body, line)
		default:
			prose = append(prose, line)
			if strings.TrimSpace(line) != "" {
				caption = line
			}
		}
	}
	p.prose = strings.Join(prose, "\n")
	return p
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// spans returns the page's inline code spans, each on one line as a
// renderer shows it.
func (p docPage) spans() []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(p.prose, -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

func TestDocsCodeSpansAreClosed(t *testing.T) {
	for _, p := range docPages(t) {
		for _, m := range codeSpan.FindAllStringSubmatch(p.prose, -1) {
			if strings.Contains(m[1], "\n\n") {
				t.Errorf("%s: a backtick is not closed before a paragraph ends: `%.60s…", p.name, m[1])
			}
		}
	}
}

var mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// headingAnchors returns the anchors GitHub gives the page's headings.
func headingAnchors(p docPage) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(p.prose, "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		// A repeated heading gets -1, -2, ... after its anchor.
		if n := seen[anchor]; n > 0 {
			anchors[anchor+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}

// Every relative link of every page points at a file that exists (and at a
// heading of it, when it names one), and README.md links every docs page.
func TestDocsLinks(t *testing.T) {
	pages := docPages(t)
	byName := map[string]docPage{}
	for _, p := range pages {
		byName[p.name] = p
	}
	linked := map[string]bool{}
	for _, p := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(p.prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := p.name
			if file != "" {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.name), file)))
			}
			if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
				t.Errorf("%s: link %q: %s does not exist", p.name, target, path)
				continue
			}
			if p.name == "README.md" {
				linked[path] = true
			}
			if anchor == "" {
				continue
			}
			if to, ok := byName[path]; !ok {
				t.Errorf("%s: link %q: only links to README.md and docs/*.md may name a heading", p.name, target)
			} else if !headingAnchors(to)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", p.name, target, path, anchor)
			}
		}
	}
	for _, p := range pages {
		if strings.HasPrefix(p.name, "docs/") && !linked[p.name] {
			t.Errorf("README.md: no link to %s: every docs page must be reachable from the README", p.name)
		}
	}
}

// repoPath finds paths into the repository named in a page's text, prose
// and blocks alike.
var repoPath = regexp.MustCompile("(?:^|[\\s`(\\[\"'])(?:\\./)?((?:cmd|ingest|processors|sinks|schemas|internal|scripts|docs)/[A-Za-z0-9_./-]*)")

func TestDocsFilePathsExist(t *testing.T) {
	for _, p := range docPages(t) {
		for _, m := range repoPath.FindAllStringSubmatch(p.text, -1) {
			path := strings.TrimRight(m[1], ".,:")
			if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
				t.Errorf("%s: names %s, which does not exist", p.name, path)
			}
		}
	}
}

// nopProducer stands in for Kafka: the metrics test serves no request.
type nopProducer struct{}

func (nopProducer) Produce(context.Context, *kgo.Record, func(*kgo.Record, error)) {}

// withSecrets gives every stream of cfg the demo secret, which ingest needs
// to start.
func withSecrets(cfg *config.Config) *config.Config {
	for _, s := range cfg.Streams {
		s.Signature.Secrets = []string{demoSecret}
	}
	return cfg
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredMetrics builds every component's metrics on one registry, as
// the commands do, and returns the names of their metric families.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	ops := telemetry.NewOps()
	if _, err := ingest.NewHandler(withSecrets(cfg).StreamList(), nopProducer{}, ingest.Options{Registerer: ops.Registry}); err != nil {
		t.Fatal(err)
	}
	processors.NewMetrics(ops.Registry)
	sinkch.New(sinkch.Options{Config: cfg, Ops: ops})
	if _, err := relay.New(relay.Options{Config: cfg, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	cfg.Bridge.Secret = strings.Repeat("k", config.MinBridgeSecretBytes)
	if _, err := realtime.New(realtime.Options{Config: cfg, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	// Vectors without series are not gathered; their descriptions are.
	descs := make(chan *prometheus.Desc)
	go func() {
		ops.Registry.Describe(descs)
		close(descs)
	}()
	names := map[string]bool{}
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], "driftguard_") {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("no driftguard_ metric registered: the registry's descriptions changed shape")
	}
	return names
}

var metricSpan = regexp.MustCompile(`^(driftguard_[a-z0-9_]+)(\{[^}]*\})?$`)

// Every backticked metric name is registered by a component, and every
// metric a component registers is named on some page.
func TestDocsMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	documented := map[string]bool{}
	for _, p := range docPages(t) {
		for _, span := range p.spans() {
			m := metricSpan.FindStringSubmatch(span)
			if m == nil {
				continue
			}
			name := m[1]
			if !registered[name] {
				// A histogram's series: its family is what the components register.
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && registered[base] {
						name = base
					}
				}
			}
			if !registered[name] {
				t.Errorf("%s: `%s` is not a metric any component registers (they register %s)", p.name, m[1], sortedKeys(registered))
				continue
			}
			documented[name] = true
		}
	}
	for _, name := range sortedKeys(registered) {
		if !documented[name] {
			t.Errorf("metric %s is registered but no page names it: document it with its component (docs/ingest.md, docs/processors.md or docs/sink-clickhouse.md)", name)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// configPaths maps every dotted path to a yaml field of t, below prefix, to
// whether the field is a leaf. "*" stands for one key of a map of sections
// (a stream's name), "**" for any keys below a map of values (an event
// type, which may hold dots).
func configPaths(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for name, ft := range config.YAMLFields(t) {
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		switch {
		case isStruct(ft):
			out[path] = false
			configPaths(ft, path, out)
		case ft.Kind() == reflect.Map && isStruct(ft.Elem()):
			out[path] = false
			configPaths(ft.Elem(), path+".*", out)
		case ft.Kind() == reflect.Map:
			out[path] = true
			out[path+".**"] = true
		default:
			out[path] = true
		}
	}
}

func isStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct
}

// matchPath reports whether the segments of path match pattern's.
func matchPath(pattern, path []string) bool {
	for i, seg := range pattern {
		if seg == "**" {
			return len(path) > i
		}
		if i >= len(path) || seg != "*" && seg != path[i] {
			return false
		}
	}
	return len(path) == len(pattern)
}

// configSchema is what the docs may name of the configuration.
type configSchema struct {
	// paths are the valid paths: the whole config's, and a stream entry's
	// on their own (`limits.dedup_ids`), each mapped to whether it is a
	// leaf.
	paths map[string]bool
	// configLeaves and streamLeaves are the keys that hold values, of the
	// config outside streams and of a stream entry.
	configLeaves, streamLeaves []string
	// configKeys and streamKeys are the top-level keys of a config file
	// and of a stream entry; a config path starts with one of them.
	configKeys, streamKeys map[string]bool
}

func loadConfigSchema() configSchema {
	whole, entry := map[string]bool{}, map[string]bool{}
	configPaths(reflect.TypeFor[config.Config](), "", whole)
	configPaths(reflect.TypeFor[config.Stream](), "", entry)
	s := configSchema{paths: map[string]bool{}, configKeys: map[string]bool{}, streamKeys: map[string]bool{}}
	for set, keys := range map[*map[string]bool]map[string]bool{&whole: s.configKeys, &entry: s.streamKeys} {
		for path, leaf := range *set {
			s.paths[path] = leaf
			top, _, _ := strings.Cut(path, ".")
			keys[top] = true
		}
	}
	for _, path := range sortedKeys(whole) {
		if whole[path] && !strings.HasPrefix(path, "streams.") && !strings.HasSuffix(path, "**") {
			s.configLeaves = append(s.configLeaves, path)
		}
	}
	for _, path := range sortedKeys(entry) {
		if entry[path] && !strings.HasSuffix(path, "**") {
			s.streamLeaves = append(s.streamLeaves, path)
		}
	}
	return s
}

func (s configSchema) valid(path string) bool {
	segs := strings.Split(path, ".")
	for pattern := range s.paths {
		if matchPath(strings.Split(pattern, "."), segs) {
			return true
		}
	}
	return false
}

// dottedPath is how a config path reads in a code span; one whose first
// segment is a config key and whose last is no file extension is taken for
// one (`driftguard.yaml`, `clickhouse.sh` and `config.Load` are not).
var dottedPath = regexp.MustCompile(`^[a-z_]+(\.[a-z_<>]+)+$`)

var fileExtensions = []string{"go", "md", "yaml", "yml", "json", "sql", "sh", "py", "xml", "txt"}

func (s configSchema) isPathToken(span string) bool {
	if !dottedPath.MatchString(span) {
		return false
	}
	segs := strings.Split(span, ".")
	return (s.configKeys[segs[0]] || s.streamKeys[segs[0]]) && !slices.Contains(fileExtensions, segs[len(segs)-1])
}

// Every backticked config path exists; every key of a stream entry is named
// in docs/catalogue.md and every other key in docs/operations.md.
func TestDocsConfigPaths(t *testing.T) {
	schema := loadConfigSchema()
	named := map[string]map[string]bool{}
	for _, p := range docPages(t) {
		named[p.name] = map[string]bool{}
		for _, span := range p.spans() {
			named[p.name][span] = true
			if schema.isPathToken(span) && !schema.valid(span) {
				t.Errorf("%s: `%s` is not a config path (config.Config and config.Stream have no such yaml key)", p.name, span)
			}
		}
	}
	namedIn := func(page, leaf string, forms ...string) bool {
		for span := range named[page] {
			if span == leaf || slices.ContainsFunc(forms, func(f string) bool { return matchPath(strings.Split(f, "."), strings.Split(span, ".")) }) {
				return true
			}
		}
		return false
	}
	for _, leaf := range schema.streamLeaves {
		if !namedIn("docs/catalogue.md", leaf, "streams.*."+leaf) {
			t.Errorf("docs/catalogue.md: stream entry key %s is not documented: add `%s` to its reference", leaf, leaf)
		}
	}
	for _, leaf := range schema.configLeaves {
		if !namedIn("docs/operations.md", leaf) {
			t.Errorf("docs/operations.md: config key %s is not documented: add `%s` to its table", leaf, leaf)
		}
	}
}

// firstColumn returns the backticked names in the first column of the
// table under the heading "## <heading>" of the page.
func firstColumn(t *testing.T, p docPage, heading string) []string {
	t.Helper()
	lines := strings.Split(p.prose, "\n")
	start := slices.Index(lines, "## "+heading)
	if start < 0 {
		t.Fatalf("%s: no heading %q", p.name, "## "+heading)
	}
	cell := regexp.MustCompile("^\\|\\s*`([a-z_]+)`\\s*\\|")
	var names []string
	for _, line := range lines[start+1:] {
		if strings.HasPrefix(line, "#") {
			break
		}
		if m := cell.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// compareNames reports names the code has and the table lacks, and the
// other way round.
func compareNames(t *testing.T, where string, table, code []string) {
	t.Helper()
	for _, name := range code {
		if !slices.Contains(table, name) {
			t.Errorf("%s: `%s` is missing from the table", where, name)
		}
	}
	for i, name := range table {
		switch {
		case !slices.Contains(code, name):
			t.Errorf("%s: `%s` is in the table but not in the code", where, name)
		case slices.Index(table, name) != i:
			t.Errorf("%s: `%s` is in the table twice", where, name)
		}
	}
}

// The outcome and reason tables of docs/architecture.md list exactly
// record.Results and record.Reasons.
func TestDocsOutcomesAndReasons(t *testing.T) {
	page := parsePage("docs/architecture.md", mustRead(t, "docs/architecture.md"))
	var results, reasons []string
	for _, r := range record.Results {
		results = append(results, string(r))
	}
	for _, r := range record.Reasons {
		reasons = append(reasons, string(r))
	}
	compareNames(t, "docs/architecture.md, ## Outcomes (record.Results)", firstColumn(t, page, "Outcomes"), results)
	compareNames(t, "docs/architecture.md, ## Reasons (record.Reasons)", firstColumn(t, page, "Reasons"), reasons)
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var envVariable = regexp.MustCompile(`DRIFTGUARD_[A-Z0-9_]*(?:<[A-Z]+>)?`)

// readByConfig reports whether config.Load reads the variable: set, it
// changes the configuration or makes it invalid.
func readByConfig(t *testing.T, name string) bool {
	t.Helper()
	base, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Load("", []string{name + "=warn"})
	if err != nil {
		return true
	}
	// A variable it does not read changes only the warnings: it warns of it.
	got.Warnings = base.Warnings
	return !reflect.DeepEqual(base, got)
}

// readByCommand reports whether the command line reads DRIFTGUARD_CONFIG:
// naming a broken file in it makes a command fail on its configuration.
func readByCommand(t *testing.T) bool {
	t.Helper()
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("kafka: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DRIFTGUARD_CONFIG", broken)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"migrate", "--print"}, &stdout, &stderr)
	return code == 2 && strings.Contains(stderr.String(), broken)
}

// Every DRIFTGUARD_* variable a page names is one the code reads.
func TestDocsEnvironmentVariables(t *testing.T) {
	// Read by the tests, not by the configuration.
	known := map[string]bool{testenv.EnvKafka: true, testenv.EnvKafkaPID: true, testenv.EnvClickHouse: true,
		testenv.EnvClickHouseSecure: true, testenv.EnvClickHouseCA: true, testenv.EnvClickHouseUser: true, testenv.EnvClickHousePassword: true,
		testenv.EnvRequire: true, envCrashSeed: true, envScreenshots: true, envRecoveryRounds: true,
		testenv.EnvCluster: true, testenv.EnvClusterPIDs: true, testenv.EnvClusterControl: true, testenv.EnvFaults: true, envFaultSeed: true,
		testenv.EnvSecureSASLSSL: true, testenv.EnvSecureMTLS: true, testenv.EnvSecureSASLPlaintext: true, testenv.EnvSecureCAFile: true,
		testenv.EnvSecureCertFile: true, testenv.EnvSecureKeyFile: true, testenv.EnvSecureUser: true, testenv.EnvSecurePassword: true}
	if readByCommand(t) {
		known["DRIFTGUARD_CONFIG"] = true
	}
	checked := map[string]bool{}
	for _, p := range docPages(t) {
		for _, at := range envVariable.FindAllStringIndex(p.text, -1) {
			name := p.text[at[0]:at[1]]
			if name == "DRIFTGUARD_" || checked[p.name+name] {
				continue // the prefix itself, as in DRIFTGUARD_*
			}
			if strings.HasPrefix(p.text[at[1]:], notAVariable) {
				continue // the typo of the warning's example
			}
			checked[p.name+name] = true
			probe := strings.ReplaceAll(name, "<STREAM>", "PRESENCE")
			switch {
			case known[probe]:
			case strings.HasSuffix(probe, "_"):
				if !slices.ContainsFunc(sortedKeys(known), func(k string) bool { return strings.HasPrefix(k, probe) }) {
					t.Errorf("%s: %s* names no variable the code reads", p.name, name)
				}
			case readByConfig(t, probe):
				known[probe] = true
			default:
				t.Errorf("%s: %s is not a variable the code reads (config.Load ignores it)", p.name, name)
			}
		}
	}
}

// notAVariable follows a variable the docs name as one the code does not
// read, quoting the warning about it.
const notAVariable = " is not a driftguard variable"

// Every variable of the configuration (an `env` tag of config.Config) has
// its row in the environment table of docs/operations.md, naming the key it
// sets.
func TestDocsEveryConfigVariable(t *testing.T) {
	page := mustRead(t, "docs/operations.md")
	_, table, ok := strings.Cut(page, "\n### Environment\n")
	if !ok {
		t.Fatal("docs/operations.md: no ### Environment section")
	}
	table, _, _ = strings.Cut(table, "\n#")
	// A row may list several variables in its first cell, and then name
	// their keys by the last part alone (`ca_file`, `cert_file`).
	rows := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || cells[0] != "" {
			continue
		}
		for _, name := range envVariable.FindAllString(cells[1], -1) {
			rows[name] = strings.Join(cells[2:], "|")
		}
	}
	for _, v := range config.EnvVariables() {
		row, ok := rows[v.Name]
		leaf := v.Path[strings.LastIndex(v.Path, ".")+1:]
		switch {
		case !ok:
			t.Errorf("docs/operations.md, ### Environment: %s (%s) has no row: add `| \x60%s\x60 | \x60%s\x60 |`", v.Name, v.Path, v.Name, v.Path)
		case !strings.Contains(row, "`"+v.Path+"`") && !strings.Contains(row, "`"+leaf+"`"):
			t.Errorf("docs/operations.md, ### Environment: the row of %s does not name `%s`, the key it sets: %s", v.Name, v.Path, row)
		}
	}
}

var schemaCaption = regexp.MustCompile("`([A-Za-z0-9_.-]+\\.json)`")

// Every JSON block is valid JSON, and every YAML block is a config file
// that config.Load accepts without warnings, with the JSON Schemas its page
// shows next to it, and that ingest and the processors can run, or else a
// stream entry whose every key is known.
func TestDocsExamples(t *testing.T) {
	schema := loadConfigSchema()
	for _, p := range docPages(t) {
		dir := t.TempDir()
		for _, b := range p.blocks {
			if b.lang != "json" {
				continue
			}
			if !json.Valid([]byte(b.body)) {
				t.Errorf("%s:%d: the JSON block is not valid JSON", p.name, b.line)
				continue
			}
			if m := schemaCaption.FindStringSubmatch(b.caption); m != nil {
				if err := os.WriteFile(filepath.Join(dir, m[1]), []byte(b.body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, b := range p.blocks {
			if b.lang == "yaml" || b.lang == "yml" {
				checkYAMLExample(t, schema, p.name, b, dir)
			}
		}
	}
}

func checkYAMLExample(t *testing.T, schema configSchema, page string, b fencedBlock, dir string) {
	t.Helper()
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal([]byte(b.body), &doc); err != nil {
		t.Errorf("%s:%d: the YAML block does not parse: %v", page, b.line, err)
		return
	}
	if !slices.ContainsFunc(sortedKeys(doc), func(k string) bool { return !schema.configKeys[k] }) {
		loadExample(t, page, b, dir)
		return
	}
	if !slices.ContainsFunc(sortedKeys(doc), func(k string) bool { return !schema.streamKeys[k] }) {
		// Not a config file: it must be a stream entry.
		dec := yaml.NewDecoder(strings.NewReader(b.body))
		dec.KnownFields(true)
		var s config.Stream
		if err := dec.Decode(&s); err != nil {
			t.Errorf("%s:%d: the YAML block is a stream entry with an unknown key: %v", page, b.line, err)
		}
		return
	}
	t.Errorf("%s:%d: the YAML block is neither a config file nor a stream entry (top-level keys %v)", page, b.line, sortedKeys(doc))
}

// loadExample loads a config file example from dir, where its page's
// schemas are, and builds what ingest and the processors would run of it.
func loadExample(t *testing.T, page string, b fencedBlock, dir string) {
	t.Helper()
	path := filepath.Join(dir, "driftguard.yaml")
	if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
		t.Fatal(err)
	}
	// The pages keep SASL passwords out of the file, in the environment.
	var environ []string
	if strings.Contains(b.body, "sasl:") {
		environ = []string{"DRIFTGUARD_KAFKA_SASL_PASSWORD=from-a-secret"}
	}
	cfg, err := config.Load(path, environ)
	if err != nil {
		t.Errorf("%s:%d: config.Load refuses the example:\n%v", page, b.line, err)
		return
	}
	for _, w := range cfg.Warnings {
		t.Errorf("%s:%d: config.Load warns about the example: %s", page, b.line, w)
	}
	if _, err := ingest.NewHandler(withSecrets(cfg).StreamList(), nopProducer{}, ingest.Options{}); err != nil {
		t.Errorf("%s:%d: ingest cannot serve the example: %v", page, b.line, err)
	}
	for _, s := range cfg.StreamList() {
		if why := processors.Unsupported(s); why != "" {
			t.Errorf("%s:%d: the processors cannot decide stream %s of the example: %s", page, b.line, s.Name, why)
		}
	}
}

// The README's layout names every folder at the top of the tree and every
// package of internal/, and every folder it names exists.
func TestDocsLayoutMatchesTheTree(t *testing.T) {
	var layout string
	for _, p := range docPages(t) {
		if p.name != "README.md" {
			continue
		}
		for _, b := range p.blocks {
			if strings.Contains(b.caption, "go tool task check") || strings.HasPrefix(b.body, "cmd/") || strings.Contains(b.body, "\ncmd/driftguard/ ") {
				layout = b.body
			}
		}
	}
	if layout == "" {
		t.Fatal("README.md has no layout block")
	}
	// Each line names a folder, then says what it holds; a line that
	// starts with spaces goes on with the one before.
	described := map[string]string{}
	var last string
	for _, line := range strings.Split(layout, "\n") {
		if line == "" {
			continue
		}
		if line[0] != ' ' {
			last, _, _ = strings.Cut(line, " ")
			if !strings.HasSuffix(last, "/") {
				t.Errorf("layout line %q does not start with a folder", line)
				continue
			}
			if info, err := os.Stat(filepath.Join(repoRoot, last)); err != nil || !info.IsDir() {
				t.Errorf("layout names %s, which is not a folder of the tree", last)
			}
		}
		described[last] += line + "\n"
	}
	out, err := exec.Command("git", "-C", repoRoot, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	covered := func(dir string) bool {
		for folder := range described {
			if dir+"/" == folder || strings.HasPrefix(dir+"/", folder) || strings.HasPrefix(folder, dir+"/") {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	for _, file := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir := filepath.Dir(file)
		if dir == "." || strings.HasPrefix(dir, ".") || seen[dir] {
			continue
		}
		seen[dir] = true
		if top, _, _ := strings.Cut(dir, "/"); !covered(top) {
			t.Errorf("the layout does not name %s/", top)
		}
		if rest, ok := strings.CutPrefix(dir, "internal/"); ok {
			pkg, _, _ := strings.Cut(rest, "/")
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(pkg) + `\b`).MatchString(described["internal/"]) {
				t.Errorf("the layout's internal/ line does not name internal/%s", pkg)
			}
		}
	}
}
