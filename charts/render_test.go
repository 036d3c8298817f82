// Package charts holds driftguard's Helm chart and the tests that render
// it with the Helm SDK and decode every manifest into its Kubernetes type.
package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir       = "driftguard"
	productionFile = "driftguard/ci/production-values.yaml"
	releaseName    = "dg"
	namespace      = "streams"
	// kubeVersion is the oldest Kubernetes the chart supports (Chart.yaml's
	// kubeVersion): the preStop sleep action is on by default from 1.30.
	kubeVersion = "1.30"
)

// rendered is one render of the chart: every manifest, decoded, by kind.
type rendered struct {
	values chartutil.Values

	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	jobs            []*batchv1.Job
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	ingresses       []*networkingv1.Ingress
	networkPolicies []*networkingv1.NetworkPolicy
	// pods are the bare Pods: the `helm test` pod.
	pods            []*corev1.Pod
	serviceMonitors []*monitoringv1.ServiceMonitor
	rules           []*monitoringv1.PrometheusRule
	// annotations of every object by "Kind/name", hooks included.
	annotations map[string]map[string]string
	notes       string
}

// kinds maps each kind the chart may render to the typed object it decodes
// into and the list it joins. Any other kind fails the test.
func (r *rendered) kinds() map[string]func() (any, func()) {
	return map[string]func() (any, func()){
		"v1/ConfigMap": func() (any, func()) {
			o := &corev1.ConfigMap{}
			return o, func() { r.configMaps = append(r.configMaps, o) }
		},
		"v1/Service": func() (any, func()) {
			o := &corev1.Service{}
			return o, func() { r.services = append(r.services, o) }
		},
		"v1/ServiceAccount": func() (any, func()) {
			o := &corev1.ServiceAccount{}
			return o, func() { r.serviceAccounts = append(r.serviceAccounts, o) }
		},
		"apps/v1/Deployment": func() (any, func()) {
			o := &appsv1.Deployment{}
			return o, func() { r.deployments = append(r.deployments, o) }
		},
		"apps/v1/StatefulSet": func() (any, func()) {
			o := &appsv1.StatefulSet{}
			return o, func() { r.statefulSets = append(r.statefulSets, o) }
		},
		"batch/v1/Job": func() (any, func()) {
			o := &batchv1.Job{}
			return o, func() { r.jobs = append(r.jobs, o) }
		},
		"policy/v1/PodDisruptionBudget": func() (any, func()) {
			o := &policyv1.PodDisruptionBudget{}
			return o, func() { r.pdbs = append(r.pdbs, o) }
		},
		"autoscaling/v2/HorizontalPodAutoscaler": func() (any, func()) {
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			return o, func() { r.hpas = append(r.hpas, o) }
		},
		"networking.k8s.io/v1/Ingress": func() (any, func()) {
			o := &networkingv1.Ingress{}
			return o, func() { r.ingresses = append(r.ingresses, o) }
		},
		"networking.k8s.io/v1/NetworkPolicy": func() (any, func()) {
			o := &networkingv1.NetworkPolicy{}
			return o, func() { r.networkPolicies = append(r.networkPolicies, o) }
		},
		"v1/Pod": func() (any, func()) {
			o := &corev1.Pod{}
			return o, func() { r.pods = append(r.pods, o) }
		},
		"monitoring.coreos.com/v1/ServiceMonitor": func() (any, func()) {
			o := &monitoringv1.ServiceMonitor{}
			return o, func() { r.serviceMonitors = append(r.serviceMonitors, o) }
		},
		"monitoring.coreos.com/v1/PrometheusRule": func() (any, func()) {
			o := &monitoringv1.PrometheusRule{}
			return o, func() { r.rules = append(r.rules, o) }
		},
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ReadValues(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return vals
}

// renderValues renders the chart as `helm install` would, the values
// checked against values.schema.json first, and returns the manifests by
// template name.
func renderValues(c *chart.Chart, vals map[string]any) (chartutil.Values, map[string]string, error) {
	caps := *chartutil.DefaultCapabilities
	caps.KubeVersion = chartutil.KubeVersion{Version: "v" + kubeVersion + ".0", Major: "1", Minor: strings.TrimPrefix(kubeVersion, "1.")}
	top, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, &caps)
	if err != nil {
		return nil, nil, err
	}
	// Strict: a template reading a value that does not exist fails.
	out, err := engine.Engine{Strict: true}.Render(c, top)
	return top, out, err
}

// render renders the chart with vals (nil: the defaults) and decodes every
// manifest strictly: an unknown field or kind fails the test.
func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	top, files, err := renderValues(loadChart(t), vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := &rendered{values: top, annotations: map[string]map[string]string{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	kinds := r.kinds()
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = files[name]
			continue
		}
		for i, doc := range splitManifests(files[name]) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name        string            `json:"name"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: %v\n%s", name, i, err, doc)
			}
			build, ok := kinds[head.APIVersion+"/"+head.Kind]
			if !ok {
				t.Fatalf("%s #%d: kind %s/%s is not one the tests know", name, i, head.APIVersion, head.Kind)
			}
			obj, keep := build()
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s %s): %v", name, i, head.Kind, head.Metadata.Name, err)
			}
			keep()
			r.annotations[head.Kind+"/"+head.Metadata.Name] = head.Metadata.Annotations
		}
	}
	return r
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

// splitManifests splits a rendered template into its non-empty documents.
func splitManifests(s string) []string {
	var docs []string
	for _, doc := range separator.Split(s, -1) {
		if onlyComments(doc) {
			continue
		}
		docs = append(docs, doc)
	}
	return docs
}

func onlyComments(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// merge returns base with overlay merged in, recursively, as a values
// file given after another would.
func merge(base, overlay map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range overlay {
		if o, ok := v.(map[string]any); ok {
			if b, ok := out[k].(map[string]any); ok {
				out[k] = merge(b, o)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// valuesYAML parses a values overlay written in YAML.
func valuesYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// podTemplates are the pod templates of every Deployment, StatefulSet and
// Job, by "Kind/name" (the `helm test` Pod is apart, in pods).
func (r *rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, d := range r.deployments {
		out["Deployment/"+d.Name] = &d.Spec.Template
	}
	for _, s := range r.statefulSets {
		out["StatefulSet/"+s.Name] = &s.Spec.Template
	}
	for _, j := range r.jobs {
		out["Job/"+j.Name] = &j.Spec.Template
	}
	return out
}

func (r *rendered) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range r.configMaps {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

func (r *rendered) deployment(t *testing.T, component string) *appsv1.Deployment {
	t.Helper()
	for _, d := range r.deployments {
		if d.Name == fullName(component) {
			return d
		}
	}
	t.Fatalf("no Deployment %s", fullName(component))
	return nil
}

func (r *rendered) service(name string) *corev1.Service {
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// fullName is the name the chart gives a component of the test release.
func fullName(component string) string {
	return fmt.Sprintf("%s-driftguard-%s", releaseName, component)
}

// writeConfig writes the config file and schemas of a ConfigMap to a
// folder, as the pods see them at /etc/driftguard, and returns the file.
func writeConfig(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := cm.Data["config.yaml"]; !ok {
		t.Fatalf("ConfigMap %s has no config.yaml", cm.Name)
	}
	return filepath.Join(dir, "config.yaml")
}
