package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/driftguard/driftguard/internal/testenv"
)

// alertTests holds one promtool unit test file per alert, named after it.
// They read the rules of the production values rendered for release dg in
// namespace streams (rule_files: [rules.yaml]).
const alertTests = "testdata/alerts"

// promtool is Prometheus's own rule checker, from Debian's prometheus
// package (scripts/promtool.sh install, run by the chart task).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool not installed: bash scripts/promtool.sh install (the chart task `go tool task chart` runs it)")
	}
	return path
}

// The rendered alert rules pass `promtool check rules`, and every alert
// passes its `promtool test rules` file: it fires from series shaped like
// driftguard's metrics and stays quiet otherwise.
func TestAlertRulesWithPromtool(t *testing.T) {
	bin := promtool(t)
	r := render(t, readValues(t, productionFile))
	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules", len(r.rules))
	}
	// A PrometheusRule's spec is a Prometheus rules file.
	rules, err := yaml.Marshal(r.rules[0].Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, "check", "rules", filepath.Join(dir, "rules.yaml"))

	alerts := map[string]bool{}
	for _, g := range r.rules[0].Spec.Groups {
		for _, rule := range g.Rules {
			alerts[rule.Alert] = true
		}
	}
	files, err := filepath.Glob(filepath.Join(alertTests, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests []string
	for _, f := range files {
		alert := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if !alerts[alert] {
			t.Errorf("%s tests %s, which is not an alert of the chart", f, alert)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkAlertTest(t, f, alert, data)
		dst := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, dst)
	}
	for alert := range alerts {
		if !slices.Contains(files, filepath.Join(alertTests, alert+".yaml")) {
			t.Errorf("alert %s has no unit test: add %s/%s.yaml", alert, alertTests, alert)
		}
	}
	runPromtool(t, bin, append([]string{"test", "rules"}, tests...)...)
}

// checkAlertTest checks that a unit test file tests its alert alone, on the
// rendered rules, and both ways: at some evaluation it fires, at another
// it is quiet.
func checkAlertTest(t *testing.T, file, alert string, data []byte) {
	t.Helper()
	var doc struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if !slices.Equal(doc.RuleFiles, []string{"rules.yaml"}) {
		t.Errorf("%s: rule_files %v, want [rules.yaml] (the rendered rules)", file, doc.RuleFiles)
	}
	fires, quiet := false, false
	for _, tc := range doc.Tests {
		for _, a := range tc.AlertRuleTest {
			if a.Alertname != alert {
				t.Errorf("%s tests %s: one file per alert", file, a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires = true
			} else {
				quiet = true
			}
		}
	}
	if !fires || !quiet {
		t.Errorf("%s: fires at some evaluation: %v, quiet at another: %v; want both", file, fires, quiet)
	}
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args[:2], " "), err, out)
	}
}
