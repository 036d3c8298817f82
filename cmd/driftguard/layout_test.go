package main

// The rules of the layout (DESIGN.md §8), held against the imports the Go
// tool reports, so a wrong import fails `go tool task check` instead of
// waiting for a review:
//
//   - nothing under internal/ imports a component;
//   - no component imports another (they meet in Kafka, internal/ and
//     schemas/);
//   - the ordering rules (processors/decide) import no Kafka client and
//     read no clock;
//   - the processors import no sarama (goka's graph package links it, but
//     the runtime speaks franz-go), and the runtime that runs their goka
//     graphs (processors/eos) imports nothing of driftguard: it could be
//     lifted out as a library.

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/driftguard/driftguard"

// components are the packages that run as components, each with every
// package under it.
var components = []string{"ingest", "processors", "sinks/clickhouse", "sinks/realtime", "relay"}

// rulesPackage is the package of the ordering rules.
const rulesPackage = module + "/processors/decide"

// runtimePackage is the package that runs goka graphs exactly once.
const runtimePackage = module + "/processors/eos"

// runtimeViolations lists the processors' direct imports of sarama and
// the runtime's imports of driftguard packages (tests aside).
func runtimeViolations(pkgs []goPackage) []string {
	var out []string
	for _, p := range pkgs {
		if componentOf(p.ImportPath) != "processors" {
			continue
		}
		for _, imp := range p.Imports {
			switch {
			case imp == "github.com/IBM/sarama" || strings.HasPrefix(imp, "github.com/IBM/sarama/"):
				out = append(out, fmt.Sprintf("%s imports %s: the processors speak franz-go", p.ImportPath, imp))
			case p.ImportPath == runtimePackage && strings.HasPrefix(imp, module+"/"):
				out = append(out, fmt.Sprintf("%s imports %s: the runtime names no driftguard package", p.ImportPath, imp))
			}
		}
	}
	return out
}

// kafkaClients are the module paths the ordering rules must not reach.
var kafkaClients = []string{"github.com/lovoo/goka", "github.com/twmb/franz-go", "github.com/IBM/sarama"}

// clockReads are the functions of package time that read or wait on the
// clock.
var clockReads = []string{"Now", "Since", "Until", "Sleep", "Tick", "After", "AfterFunc", "NewTimer", "NewTicker"}

// goPackage is what `go list -json` says of one package.
type goPackage struct {
	ImportPath, Dir                    string
	GoFiles                            []string
	Imports, TestImports, XTestImports []string
	Deps                               []string
}

// componentOf is the component pkg belongs to, "" for none.
func componentOf(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return ""
	}
	for _, c := range components {
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return c
		}
	}
	return ""
}

// importViolations lists the imports, test imports included, that break
// the first two rules.
func importViolations(pkgs []goPackage) []string {
	var out []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		own := componentOf(p.ImportPath)
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			c := componentOf(imp)
			switch {
			case c == "":
			case strings.HasPrefix(rel, "internal/"):
				out = append(out, fmt.Sprintf("%s imports the component %s (%s): nothing under internal/ may", rel, c, imp))
			case own != "" && c != own:
				out = append(out, fmt.Sprintf("the component %s imports the component %s (%s in %s): components meet in Kafka and internal/", own, c, imp, rel))
			}
		}
	}
	return out
}

// rulesViolations lists the Kafka clients the ordering rules reach and the
// clock reads in their files.
func rulesViolations(pkgs []goPackage, readFile func(dir, name string) ([]byte, error)) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		// The rules themselves; decidetest, beside them, is test support
		// and may use the test harness.
		if p.ImportPath != rulesPackage {
			continue
		}
		for _, dep := range p.Deps {
			for _, client := range kafkaClients {
				if dep == client || strings.HasPrefix(dep, client+"/") {
					out = append(out, fmt.Sprintf("%s reaches %s: the ordering rules know no Kafka client", p.ImportPath, dep))
				}
			}
		}
		for _, name := range p.GoFiles {
			src, err := readFile(p.Dir, name)
			if err != nil {
				return nil, err
			}
			reads, err := clockCalls(strings.TrimPrefix(p.ImportPath, module+"/")+"/"+name, src)
			if err != nil {
				return nil, err
			}
			out = append(out, reads...)
		}
	}
	return out, nil
}

// clockCalls lists the uses of package time's clock in one file.
func clockCalls(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName := ""
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" {
		return nil, nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == timeName && slices.Contains(clockReads, sel.Sel.Name) {
			out = append(out, fmt.Sprintf("%s: time.%s: the ordering rules read no clock (the caller passes the time)", fset.Position(sel.Pos()), sel.Sel.Name))
		}
		return true
	})
	return out, nil
}

// listPackages runs `go list -json` over the module.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func readFile(dir, name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

func TestLayout(t *testing.T) {
	pkgs := listPackages(t)
	if !slices.ContainsFunc(pkgs, func(p goPackage) bool { return p.ImportPath == rulesPackage }) {
		t.Fatalf("go list found no %s among %d packages", rulesPackage, len(pkgs))
	}
	for _, v := range append(importViolations(pkgs), runtimeViolations(pkgs)...) {
		t.Error(v)
	}
	reads, err := rulesViolations(pkgs, readFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range reads {
		t.Error(v)
	}
}

// Each rule catches what it is there to catch.
func TestLayoutRulesFindViolations(t *testing.T) {
	pkgs := []goPackage{
		{ImportPath: module + "/internal/config"},
		{ImportPath: module + "/internal/testenv", TestImports: []string{module + "/processors"}},
		{ImportPath: module + "/ingest", Imports: []string{module + "/internal/record", module + "/sinks/clickhouse"}},
		{ImportPath: module + "/processors", Imports: []string{module + "/processors/decide"}},
		{ImportPath: module + "/cmd/driftguard", Imports: []string{module + "/ingest", module + "/processors"}},
		{ImportPath: rulesPackage, Dir: "decide", GoFiles: []string{"clock.go"}, Deps: []string{"github.com/twmb/franz-go/pkg/kgo", "time"}},
	}
	got := importViolations(pkgs)
	if len(got) != 2 || !strings.Contains(got[0], "internal/testenv imports the component processors") ||
		!strings.Contains(got[1], "the component ingest imports the component sinks/clickhouse") {
		t.Errorf("import violations %q", got)
	}
	runtime := runtimeViolations([]goPackage{
		{ImportPath: module + "/processors", Imports: []string{"github.com/IBM/sarama", "github.com/lovoo/goka"}},
		{ImportPath: runtimePackage, Imports: []string{"github.com/lovoo/goka", module + "/internal/config"}, TestImports: []string{module + "/internal/testenv"}},
	})
	if len(runtime) != 2 || !strings.Contains(runtime[0], "imports github.com/IBM/sarama") || !strings.Contains(runtime[1], "imports "+module+"/internal/config") {
		t.Errorf("runtime violations %q", runtime)
	}
	src := map[string]string{"clock.go": "package decide\n\nimport clock \"time\"\n\nfunc f() int64 { return clock.Now().UnixMilli() + int64(clock.Second) }\n"}
	reads, err := rulesViolations(pkgs, func(_, name string) ([]byte, error) { return []byte(src[name]), nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(reads) != 2 || !strings.Contains(reads[0], "reaches github.com/twmb/franz-go/pkg/kgo") || !strings.Contains(reads[1], "clock.go:5:") ||
		!strings.Contains(reads[1], "time.Now") {
		t.Errorf("rules violations %q", reads)
	}
}
