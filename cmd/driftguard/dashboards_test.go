package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/driftguard/driftguard/internal/testenv"
)

// chartDir is the Helm chart, whose dashboards and alerts read the
// components' metrics.
const chartDir = "../../charts/driftguard"

// metricName finds metric names in a PromQL expression (or a template of
// one): every metric driftguard exports starts so.
var metricName = regexp.MustCompile(`\bdriftguard_[a-z0-9_]+\b`)

// The Grafana dashboard and the alerts name only metrics that a running
// `driftguard dev` serves (every component, the sink on the test
// ClickHouse), and the dashboard shows what operators look at first.
func TestDashboardsAndAlertsNameServedMetrics(t *testing.T) {
	dashboards := dashboardExprs(t)
	alerts := alertExprs(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, out, done := devWithClickHouse(t, ctx)
	banner := waitBanner(t, ctx, out)
	// Some series appear only once a component has read (the sink's lag
	// after its first fetch), so scrape until every name is served or a
	// deadline passes, then report what is missing.
	names := map[string]bool{}
	for _, expr := range slices.Concat(dashboards, alerts) {
		for _, name := range metricName.FindAllString(expr, -1) {
			names[name] = true
		}
	}
	var served map[string]bool
	allServed := func() bool {
		served = map[string]bool{}
		// dev serves every component's metrics with ingest's, the
		// bridge's included.
		u, err := url.Parse(banner.webhooks)
		if err != nil {
			t.Fatal(err)
		}
		for name := range scrape(t, ctx, "http://"+u.Host+"/metrics") {
			served[name] = true
		}
		for name := range names {
			if !served[family(name, served)] {
				return false
			}
		}
		return true
	}
	waitCtx, stopWaiting := context.WithTimeout(ctx, 45*time.Second)
	defer stopWaiting()
	testenv.Poll(waitCtx, allServed)

	for _, set := range []struct {
		what  string
		exprs []string
	}{{"dashboard", dashboards}, {"alert", alerts}} {
		if len(set.exprs) == 0 {
			t.Errorf("no %s expressions found under %s", set.what, chartDir)
		}
		for _, expr := range set.exprs {
			for _, name := range metricName.FindAllString(expr, -1) {
				if !served[family(name, served)] {
					t.Errorf("%s expression %q names %s, which driftguard dev does not serve", set.what, expr, name)
				}
			}
		}
	}
	named := map[string]bool{}
	for _, expr := range dashboards {
		for _, name := range metricName.FindAllString(expr, -1) {
			named[family(name, served)] = true
		}
	}
	// The panels operators look at first: webhooks by status, produce latency,
	// decisions by outcome, gaps and buffer depth, quarantine, consumer
	// lag, sink rows and retries, bridge clients.
	for _, want := range []string{
		"driftguard_ingest_requests_total", "driftguard_ingest_produce_seconds",
		"driftguard_processor_decisions_total", "driftguard_processor_gaps_current",
		"driftguard_processor_buffered_events_current", "driftguard_quarantine_events_current",
		"driftguard_processor_consumer_lag", "driftguard_sink_consumer_lag",
		"driftguard_sink_rows_total", "driftguard_sink_retries_total", "driftguard_bridge_clients",
	} {
		if !named[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("dev did not stop cleanly: %v", err)
	}
}

// family is the metric family a series name belongs to: a histogram's
// _bucket, _sum and _count series are served under its name.
func family(name string, served map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && served[base] {
			return base
		}
	}
	return name
}

// scrape reads the metric families a /metrics endpoint serves, once it
// answers.
func scrape(t *testing.T, ctx context.Context, url string) map[string]*dto.MetricFamily {
	t.Helper()
	var body []byte
	testenv.WaitFor(t, ctx, url, func() bool {
		var err error
		body, err = readMetrics(url)
		return err == nil
	})
	families, err := parseMetrics(body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return families
}

// readMetrics is one read of a /metrics endpoint; an answer other than 200
// is an error.
func readMetrics(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return buf.Bytes(), nil
}

// parseMetrics reads metric families in Prometheus's text format.
func parseMetrics(body []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

// gaugeValue is the value of the unlabelled gauge name among families;
// false when there is no such gauge.
func gaugeValue(families map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := families[name]
	if f == nil || len(f.Metric) != 1 || f.Metric[0].Gauge == nil {
		return 0, false
	}
	return f.Metric[0].Gauge.GetValue(), true
}

// dashboardExprs are the PromQL expressions of every dashboard the chart
// ships: each "expr" in their JSON.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s/dashboards (%v)", chartDir, err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if s, ok := child.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		walk(doc)
	}
	return exprs
}

// ruleExpr is one alert's expression in a PrometheusRule template: a
// one-line `expr:` or a block scalar below it.
var ruleExpr = regexp.MustCompile(`(?m)^(\s*)expr:[ \t]*(\|-?|>-?)?[ \t]*(.*)$`)

// alertExprs are the expressions of the chart's PrometheusRule templates.
func alertExprs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if !strings.Contains(text, "kind: PrometheusRule") {
			continue
		}
		lines := strings.Split(text, "\n")
		for i, line := range lines {
			m := ruleExpr.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[2] == "" {
				exprs = append(exprs, m[3])
				continue
			}
			// A block scalar: the lines indented deeper than expr:.
			var block []string
			for _, next := range lines[i+1:] {
				if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= len(m[1]) {
					break
				}
				block = append(block, strings.TrimSpace(next))
			}
			exprs = append(exprs, strings.Join(slices.DeleteFunc(block, func(s string) bool { return s == "" }), " "))
		}
	}
	return exprs
}
