package charts

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// metricFamilies are the families the dashboard and the alerts may query:
// what driftguard serves. A histogram's series carry _bucket, _sum, _count.
var metricFamilies = map[string]bool{
	"driftguard_ingest_requests_total":                   true,
	"driftguard_ingest_rejections_total":                 true,
	"driftguard_ingest_produce_seconds":                  true,
	"driftguard_ingest_in_flight_requests":               true,
	"driftguard_ingest_connections":                      true,
	"driftguard_ingest_connections_limit":                true,
	"driftguard_processor_decisions_total":               true,
	"driftguard_processor_gaps_current":                  true,
	"driftguard_processor_oldest_gap_seconds":            true,
	"driftguard_processor_buffered_events_current":       true,
	"driftguard_quarantine_events_current":               true,
	"driftguard_quarantine_events_stored_total":          true,
	"driftguard_quarantine_events_reconciled_total":      true,
	"driftguard_quarantine_events_expired_total":         true,
	"driftguard_processor_consumer_lag":                  true,
	"driftguard_processor_session_restarts_total":        true,
	"driftguard_sink_consumer_lag":                       true,
	"driftguard_sink_rows_total":                         true,
	"driftguard_sink_batches_total":                      true,
	"driftguard_sink_insert_seconds":                     true,
	"driftguard_sink_retries_total":                      true,
	"driftguard_bridge_clients":                          true,
	"driftguard_bridge_messages_total":                   true,
	"driftguard_bridge_resets_total":                     true,
	"driftguard_bridge_cursor_gone_total":                true,
	"driftguard_build_info":                              true,
	"driftguard_ingest_request_duration_seconds":         true,
	"driftguard_processor_decision_latency_seconds":      true,
	"driftguard_processor_last_commit_timestamp_seconds": true,
	"driftguard_sink_last_insert_timestamp_seconds":      true,
	"driftguard_bridge_entities_dropped_total":           true,
	"driftguard_bridge_entities_over_limit":              true,
	"driftguard_replay_requests_sent_total":              true,
	"driftguard_replay_failures_total":                   true,
}

// alertFamilies are what the alerts may query besides metricFamilies:
// the scrape's `up` and kube-state-metrics' pod readiness, which say
// whether a component runs at all. franz-go's client metrics
// (driftguard_kafka_*) are not among them: their names follow the
// library, not driftguard.
var alertFamilies = map[string]bool{
	"up":                    true,
	"kube_pod_status_ready": true,
}

var histograms = []string{"driftguard_ingest_produce_seconds", "driftguard_sink_insert_seconds",
	"driftguard_ingest_request_duration_seconds", "driftguard_processor_decision_latency_seconds"}

var metricName = regexp.MustCompile(`\bdriftguard_[a-z0-9_]+`)

// externalSeries finds the series of others an alert may read.
var externalSeries = regexp.MustCompile(`\b(up|kube_pod_status_ready)\{`)

// familiesOf returns the metric families an expression names, or fails.
func familiesOf(t *testing.T, where, expr string) []string {
	t.Helper()
	return familiesIn(t, where, expr, metricFamilies)
}

// familiesIn returns the metric families an expression names, or fails
// when one is not in allowed.
func familiesIn(t *testing.T, where, expr string, allowed map[string]bool) []string {
	t.Helper()
	var out []string
	for _, m := range externalSeries.FindAllStringSubmatch(expr, -1) {
		if !allowed[m[1]] {
			t.Errorf("%s: %s is not a series this may read: %s", where, m[1], expr)
		}
		out = append(out, m[1])
	}
	for _, name := range metricName.FindAllString(expr, -1) {
		family := name
		for _, h := range histograms {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if name == h+suffix {
					family = h
				}
			}
		}
		if slices.Contains(histograms, name) {
			t.Errorf("%s: histogram %s without _bucket, _sum or _count: %s", where, name, expr)
		}
		if !allowed[family] {
			t.Errorf("%s: %s is not a metric driftguard serves: %s", where, name, expr)
		}
		out = append(out, family)
	}
	if len(out) == 0 {
		t.Errorf("%s: no driftguard metric in %s", where, expr)
	}
	return out
}

type dashboardPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// The dashboard queries every family on the list and nothing else, through
// the datasource variable; the chart ships the same file for the sidecar.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("driftguard/dashboards/driftguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard without uid or title")
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query any    `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("dashboard has no prometheus datasource variable named datasource")
	}
	queried := map[string]bool{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the datasource variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, target := range p.Targets {
				for _, f := range familiesOf(t, "panel "+p.Title, target.Expr) {
					queried[f] = true
				}
			}
		}
	}
	walk(d.Panels)
	for f := range metricFamilies {
		if !queried[f] {
			t.Errorf("no panel shows %s", f)
		}
	}

	r := render(t, readValues(t, productionFile))
	cm := r.configMap(t, fullName("dashboards"))
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", cm.Labels)
	}
	if strings.TrimSpace(cm.Data["driftguard.json"]) != strings.TrimSpace(string(data)) {
		t.Error("the dashboard ConfigMap differs from dashboards/driftguard.json")
	}
	for _, c := range render(t, nil).configMaps {
		if c.Name == fullName("dashboards") {
			t.Error("dashboards shipped with grafana.dashboards.enabled false")
		}
	}
}

// The alerts query only what driftguard serves (and `up` and
// kube-state-metrics), keep namespace in every aggregation, link a runbook
// section of docs/operations.md, and cover lag, staleness, components down
// or not ready, dead letters, the quarantine, sink retries and 503s.
func TestPrometheusRule(t *testing.T) {
	r := render(t, readValues(t, productionFile))
	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules", len(r.rules))
	}
	if r.rules[0].Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v", r.rules[0].Labels)
	}
	allowed := maps.Clone(metricFamilies)
	maps.Copy(allowed, alertFamilies)
	anchors := runbookAnchors(t)
	base, err := r.values.PathValue("Values.prometheusRule.runbookBaseURL")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, g := range r.rules[0].Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
				t.Errorf("rule %+v: alert, severity and summary needed", rule)
			}
			expr := rule.Expr.String()
			for _, f := range familiesIn(t, "alert "+rule.Alert, expr, allowed) {
				covered[f] = true
			}
			for _, m := range grouping.FindAllStringSubmatch(expr, -1) {
				if !slices.Contains(strings.Split(strings.ReplaceAll(m[2], " ", ""), ","), "namespace") {
					t.Errorf("alert %s: %s (%s) drops namespace: %s", rule.Alert, m[1], m[2], expr)
				}
			}
			if strings.Contains(expr, "driftguard_kafka_") {
				t.Errorf("alert %s reads franz-go's client metrics: %s", rule.Alert, expr)
			}
			url := rule.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, base.(string)+"#")
			if !ok || anchor != strings.ToLower(rule.Alert) {
				t.Errorf("alert %s: runbook_url %q, want %s#%s", rule.Alert, url, base, strings.ToLower(rule.Alert))
			} else if !anchors[anchor] {
				t.Errorf("alert %s: docs/operations.md has no section #%s", rule.Alert, anchor)
			}
		}
	}
	for _, f := range []string{
		"driftguard_processor_consumer_lag", "driftguard_sink_consumer_lag", "driftguard_sink_rows_total",
		"driftguard_processor_decisions_total", "driftguard_quarantine_events_current",
		"driftguard_quarantine_events_expired_total", "driftguard_sink_retries_total", "driftguard_ingest_requests_total",
		"driftguard_ingest_connections", "driftguard_processor_session_restarts_total",
		"driftguard_processor_last_commit_timestamp_seconds", "driftguard_sink_last_insert_timestamp_seconds",
		"driftguard_bridge_entities_dropped_total", "driftguard_processor_oldest_gap_seconds",
		"driftguard_replay_failures_total", "up", "kube_pod_status_ready",
	} {
		if !covered[f] {
			t.Errorf("no alert on %s", f)
		}
	}
	if len(render(t, nil).rules) != 0 {
		t.Error("a PrometheusRule by default")
	}
}

// grouping finds the label lists of aggregations and vector matches.
var grouping = regexp.MustCompile(`\b(by|on)\s*\(([^)]*)\)`)

// runbookAnchors are the anchors GitHub gives the headings of
// docs/operations.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, s := range operationsSections(t) {
		out[s.anchor] = true
	}
	return out
}

// docSection is a heading of docs/operations.md with the text up to the
// next heading, and the anchor of the level-2 section it is in.
type docSection struct {
	anchor, chapter, body string
}

// operationsSections splits docs/operations.md at its headings.
func operationsSections(t *testing.T) []docSection {
	t.Helper()
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []docSection
	var chapter string
	var body strings.Builder
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		title, ok := strings.CutPrefix(line, "#")
		if !ok || inCode {
			body.WriteString(line + "\n")
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].body = body.String()
		}
		body.Reset()
		anchor := headingAnchor(title)
		if strings.HasPrefix(title, "# ") {
			chapter = anchor
		}
		out = append(out, docSection{anchor: anchor, chapter: chapter})
	}
	if len(out) > 0 {
		out[len(out)-1].body = body.String()
	}
	return out
}

// headingAnchor is the anchor GitHub gives a heading (its text after the
// first #): lower case, spaces to dashes, punctuation dropped.
func headingAnchor(title string) string {
	title = strings.ToLower(strings.TrimSpace(strings.TrimLeft(title, "#")))
	var b strings.Builder
	for _, r := range title {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// sectionLink finds the links of a section to another of the same page.
var sectionLink = regexp.MustCompile(`\]\(#([a-z0-9_-]+)\)`)

// Every operator action of docs/operations.md is linked from the runbook
// of at least one alert the chart installs, so whoever is paged reaches
// each way to unstick a key from an alert.
func TestRunbooksReachEveryOperatorAction(t *testing.T) {
	r := render(t, readValues(t, productionFile))
	alerts := map[string]bool{}
	for _, g := range r.rules[0].Spec.Groups {
		for _, rule := range g.Rules {
			alerts[strings.ToLower(rule.Alert)] = true
		}
	}
	sections := operationsSections(t)
	reached := map[string][]string{}
	for _, s := range sections {
		if s.chapter != "alerts-and-runbooks" || !alerts[s.anchor] {
			continue
		}
		for _, m := range sectionLink.FindAllStringSubmatch(s.body, -1) {
			reached[m[1]] = append(reached[m[1]], s.anchor)
		}
	}
	actions := 0
	for _, s := range sections {
		if s.chapter != "operator-actions" || s.anchor == s.chapter {
			continue
		}
		actions++
		if len(reached[s.anchor]) == 0 {
			t.Errorf("docs/operations.md: no alert's runbook links the operator action #%s: link it from the alert that calls for it", s.anchor)
		}
	}
	if actions < 4 {
		t.Errorf("docs/operations.md: %d operator actions under ## Operator actions, want skip-gap, abandon, release and reset", actions)
	}
}

// The ServiceMonitor scrapes a port named metrics on a metrics Service of
// every component, and those Services select the components' pods.
func TestServiceMonitor(t *testing.T) {
	r := render(t, readValues(t, productionFile))
	if len(r.serviceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors", len(r.serviceMonitors))
	}
	sm := r.serviceMonitors[0]
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("endpoints %+v, want the port named metrics", sm.Spec.Endpoints)
	}
	scraped := map[string]int32{}
	for _, s := range r.services {
		if !containsLabels(s.Labels, sm.Spec.Selector.MatchLabels) {
			continue
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "metrics" {
			t.Errorf("Service %s: ports %+v", s.Name, s.Spec.Ports)
			continue
		}
		component := s.Spec.Selector["app.kubernetes.io/component"]
		for owner, pod := range r.podTemplates() {
			if strings.HasPrefix(owner, "Job/") || !containsLabels(pod.Labels, s.Spec.Selector) {
				continue
			}
			scraped[component] = resolvePort(pod.Spec.Containers[0], s.Spec.Ports[0].TargetPort)
		}
	}
	want := map[string]int32{"ingest": 9464, "processor": 9464, "sink": 9464, "relay": 9464, "bridge": 9464}
	for c, port := range want {
		if scraped[c] != port {
			t.Errorf("%s scraped on %d, want %d", c, scraped[c], port)
		}
	}
	if len(render(t, nil).serviceMonitors) != 0 {
		t.Error("a ServiceMonitor by default")
	}
}
