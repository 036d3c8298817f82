package charts

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const securityFile = "driftguard/ci/security-values.yaml"

// workload is a Deployment or StatefulSet: its selector and pod template.
type workload struct {
	name     string
	selector map[string]string
	pod      *corev1.PodTemplateSpec
}

func (r *rendered) workloads() []workload {
	var out []workload
	for _, d := range r.deployments {
		out = append(out, workload{d.Name, d.Spec.Selector.MatchLabels, &d.Spec.Template})
	}
	for _, s := range r.statefulSets {
		out = append(out, workload{s.Name, s.Spec.Selector.MatchLabels, &s.Spec.Template})
	}
	return out
}

// component is the app.kubernetes.io/component label of a workload.
func (w workload) component() string { return w.selector["app.kubernetes.io/component"] }

// NetworkPolicies: on by default for the processors, the sink and the
// relay, on request for ingest and the bridge. Each admits its component's
// public port (from the listed sources, or anyone) and its metrics port
// from Prometheus and the helm test pod, nothing else, and restricts
// egress only when egress rules are given; the relay's policy adds its own
// rules to the publishers.
func TestNetworkPolicies(t *testing.T) {
	def := render(t, nil)
	checkNetworkPolicies(t, "default", def, map[string]bool{"processor": true, "sink": true})

	sec := render(t, readValues(t, securityFile))
	checkNetworkPolicies(t, "security", sec, map[string]bool{"ingest": true, "processor": true, "sink": true, "relay": true, "bridge": true})
	for _, np := range sec.networkPolicies {
		want := 4
		if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] == "relay" {
			want++
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != want {
			t.Errorf("security: NetworkPolicy %s: types %v, %d egress rules, want Egress and the %d listed", np.Name, np.Spec.PolicyTypes, len(np.Spec.Egress), want)
		}
	}
	// The relay alone reaches the publisher's replay.url, after the rules
	// every policy has.
	egress := policyOf(t, sec, "relay").Spec.Egress
	publisher := func(r networkingv1.NetworkPolicyEgressRule) bool {
		return len(r.To) == 1 && r.To[0].IPBlock != nil && r.To[0].IPBlock.CIDR == "203.0.113.0/24" && len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 8443
	}
	if len(egress) != 5 || !publisher(egress[4]) {
		t.Errorf("security: relay's egress %+v, want the 4 of every policy, then the publisher's 203.0.113.0/24 on 8443", egress)
	}
	// The bridge's public port is open to the ingress controller and the
	// helm test pod only, ingest's (from: []) to anyone.
	bridge := policyOf(t, sec, "bridge")
	if from := bridge.Spec.Ingress[0].From; len(from) != 2 || from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" || !isTestPod(from[1]) {
		t.Errorf("security: bridge's public port from %+v, want the ingress-nginx namespace and the test pod", from)
	}
	if from := policyOf(t, sec, "ingest").Spec.Ingress[0].From; len(from) != 0 {
		t.Errorf("security: ingest's public port from %+v, want anyone", from)
	}

	off := render(t, valuesYAML(t, "processors: {networkPolicy: {enabled: false}}\nsink: {networkPolicy: {enabled: false}}\nrelay: {enabled: true, networkPolicy: {enabled: false}}"))
	if len(off.networkPolicies) != 0 {
		t.Errorf("%d NetworkPolicies with every component's off", len(off.networkPolicies))
	}
}

func policyOf(t *testing.T, r *rendered, component string) *networkingv1.NetworkPolicy {
	t.Helper()
	for _, np := range r.networkPolicies {
		if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] == component {
			return np
		}
	}
	t.Fatalf("no NetworkPolicy for %s", component)
	return nil
}

// isTestPod reports whether a peer is the release's helm test pod.
func isTestPod(p networkingv1.NetworkPolicyPeer) bool {
	return p.NamespaceSelector == nil && p.PodSelector != nil && equalMaps(p.PodSelector.MatchLabels, map[string]string{
		"app.kubernetes.io/name": "driftguard", "app.kubernetes.io/instance": releaseName, "app.kubernetes.io/component": "test",
	})
}

// publicPort is the port each component serves its users on (none for the
// processors and the sink); the metrics port is opsPort's.
var publicPort = map[string]int32{"ingest": 8080, "bridge": 8090}

func checkNetworkPolicies(t *testing.T, name string, r *rendered, want map[string]bool) {
	t.Helper()
	got := map[string]bool{}
	for _, np := range r.networkPolicies {
		component := np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"]
		got[component] = true
		where := name + ": NetworkPolicy " + np.Name
		// The policy selects exactly the component's pods.
		sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
		selected := 0
		var container corev1.Container
		for _, w := range r.workloads() {
			if sel.Matches(labels.Set(w.pod.Labels)) {
				if w.component() != component {
					t.Errorf("%s selects the pods of %s", where, w.name)
				}
				selected++
				container = w.pod.Spec.Containers[0]
			}
		}
		if selected == 0 {
			t.Errorf("%s selects no pod", where)
			continue
		}
		if np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
			t.Errorf("%s: policy types %v", where, np.Spec.PolicyTypes)
		}
		if len(np.Spec.Egress) == 0 && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Errorf("%s denies all egress", where)
		}
		metrics := opsPort[container.Name]
		ports := map[int32]bool{}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				port := p.Port.IntVal
				ports[port] = true
				if resolvePort(container, *p.Port) != port {
					t.Errorf("%s admits port %d, which container %s does not serve", where, port, container.Name)
				}
				if port == publicPort[component] {
					continue
				}
				if port != metrics {
					t.Errorf("%s admits port %d, neither public nor metrics", where, port)
				}
				// The metrics port: Prometheus and the helm test pod only.
				if !slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
					return p.PodSelector != nil && p.PodSelector.MatchLabels["app.kubernetes.io/name"] == "prometheus"
				}) || !slices.ContainsFunc(rule.From, isTestPod) || len(rule.From) != 2 {
					t.Errorf("%s: metrics port from %+v, want Prometheus and the test pod", where, rule.From)
				}
			}
		}
		if !ports[metrics] || (publicPort[component] != 0 && !ports[publicPort[component]]) {
			t.Errorf("%s admits ports %v, want the public (%d) and metrics (%d) ports", where, ports, publicPort[component], metrics)
		}
	}
	for c := range want {
		if !got[c] {
			t.Errorf("%s: no NetworkPolicy for %s", name, c)
		}
	}
	for c := range got {
		if !want[c] {
			t.Errorf("%s: a NetworkPolicy for %s", name, c)
		}
	}
}

// Pods of each workload spread over zones, softly, unless the component
// brings its own constraints or the spread is off.
func TestTopologySpread(t *testing.T) {
	for name, r := range renders(t) {
		for _, w := range r.workloads() {
			c := w.pod.Spec.TopologySpreadConstraints
			if len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" || c[0].MaxSkew != 1 ||
				c[0].WhenUnsatisfiable != corev1.ScheduleAnyway || !equalMaps(c[0].LabelSelector.MatchLabels, w.selector) {
				t.Errorf("%s: %s: topology spread %+v, want zones, ScheduleAnyway, its own pods", name, w.name, c)
			}
		}
	}
	sec := render(t, readValues(t, securityFile))
	for _, w := range sec.workloads() {
		c := w.pod.Spec.TopologySpreadConstraints
		if w.component() == "ingest" {
			if len(c) != 1 || c[0].TopologyKey != "kubernetes.io/hostname" || c[0].WhenUnsatisfiable != corev1.DoNotSchedule {
				t.Errorf("security: ingest's own constraints not used: %+v", c)
			}
		} else if len(c) != 1 || c[0].TopologyKey != "topology.kubernetes.io/zone" {
			t.Errorf("security: %s: %+v", w.name, c)
		}
	}
	for _, w := range render(t, valuesYAML(t, "topologySpread: {enabled: false}")).workloads() {
		if len(w.pod.Spec.TopologySpreadConstraints) != 0 {
			t.Errorf("spread off: %s still has %+v", w.name, w.pod.Spec.TopologySpreadConstraints)
		}
	}
}

// Ingest and the bridge sleep in preStop longer than the readiness
// probe's period, so load balancers stop sending before the process hears
// SIGTERM; the others stop at once. The render refuses a drain that would
// take the whole grace period (TestGracePeriod checks the rest of the
// budget).
func TestPreStopDrain(t *testing.T) {
	for name, r := range renders(t) {
		for _, w := range r.workloads() {
			c := w.pod.Spec.Containers[0]
			drain := preStopSleep(c)
			switch w.component() {
			case "ingest", "bridge":
				period := time.Duration(c.ReadinessProbe.PeriodSeconds) * time.Second
				if drain <= period {
					t.Errorf("%s: %s: preStop sleep %s, want more than the readiness period %s", name, w.name, drain, period)
				}
			default:
				if c.Lifecycle != nil {
					t.Errorf("%s: %s has a preStop hook: %+v", name, w.name, c.Lifecycle)
				}
			}
		}
	}
	if d := preStopSleep(render(t, readValues(t, securityFile)).deployment(t, "ingest").Spec.Template.Spec.Containers[0]); d != 15*time.Second {
		t.Errorf("ingest.preStopSleepSeconds 15 rendered %s", d)
	}
	if d := preStopSleep(render(t, valuesYAML(t, "bridge: {preStopSleepSeconds: 0}")).deployment(t, "bridge").Spec.Template.Spec.Containers[0]); d != 0 {
		t.Errorf("bridge.preStopSleepSeconds 0 rendered %s", d)
	}
	_, _, err := renderValues(loadChart(t), valuesYAML(t, "terminationGracePeriodSeconds: 20\ningest: {preStopSleepSeconds: 20}"))
	if err == nil || !strings.Contains(err.Error(), "ingest.preStopSleepSeconds (20) must stay below terminationGracePeriodSeconds (20)") {
		t.Errorf("a drain as long as the grace period: %v", err)
	}
}

// The security contexts come from values: OpenShift's restricted SCC
// assigns ids, so nulling them drops them from every pod and container
// while the rest of the restricted profile stays.
func TestSecurityContextsOverridable(t *testing.T) {
	r := render(t, readValues(t, securityFile))
	pods := r.podTemplates()
	for _, p := range r.pods {
		pods["Pod/"+p.Name] = &corev1.PodTemplateSpec{Spec: p.Spec}
	}
	for owner, pod := range pods {
		psc := pod.Spec.SecurityContext
		if psc == nil || psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil {
			t.Errorf("%s: pod securityContext %+v, want no ids", owner, psc)
		} else if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
			t.Errorf("%s: pod securityContext %+v lost runAsNonRoot or seccomp", owner, psc)
		}
		for _, c := range r.driftguardContainers(&pod.Spec) {
			sc := c.SecurityContext
			if sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil {
				t.Errorf("%s %s: securityContext %+v, want no ids", owner, c.Name, sc)
			} else if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s %s: securityContext %+v lost the restricted profile", owner, c.Name, sc)
			}
		}
	}
}

// Extra containers and volumes, envFrom and priority classes reach the
// pods they are given to, and only those.
func TestExtras(t *testing.T) {
	r := render(t, readValues(t, securityFile))
	for _, w := range r.workloads() {
		spec := w.pod.Spec
		main := spec.Containers[0]
		component := w.component()
		// Global envFrom first, on every driftguard container.
		if len(main.EnvFrom) == 0 || main.EnvFrom[0].ConfigMapRef == nil || main.EnvFrom[0].ConfigMapRef.Name != "driftguard-extra-env" {
			t.Errorf("%s: envFrom %+v, want the global ConfigMap first", w.name, main.EnvFrom)
		}
		switch component {
		case "ingest":
			if len(main.EnvFrom) != 2 || main.EnvFrom[1].SecretRef.Name != "driftguard-ingest-env" {
				t.Errorf("%s: envFrom %+v, want the global then ingest's", w.name, main.EnvFrom)
			}
			if len(spec.Containers) != 2 || spec.Containers[1].Name != "log-shipper" {
				t.Errorf("%s: containers %v, want ingest and its sidecar", w.name, containerNames(spec.Containers))
			}
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "wait" {
				t.Errorf("%s: init containers %v", w.name, containerNames(spec.InitContainers))
			}
		case "processor":
			if !mounts(main, "scratch", "/scratch") || !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "scratch" && v.EmptyDir != nil }) {
				t.Errorf("%s: the extra volume is not there or not mounted", w.name)
			}
			if spec.PriorityClassName != "driftguard-critical" {
				t.Errorf("%s: priorityClassName %q, want the component's", w.name, spec.PriorityClassName)
			}
		default:
			if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 || mounts(main, "scratch", "/scratch") || len(main.EnvFrom) != 1 {
				t.Errorf("%s got another component's extras", w.name)
			}
		}
	}
	for _, j := range r.jobs {
		for _, c := range allContainers(&j.Spec.Template.Spec) {
			if len(c.EnvFrom) != 1 {
				t.Errorf("hook %s: envFrom %+v, want the global one", c.Name, c.EnvFrom)
			}
		}
	}
	// The global priorityClassName is every pod's default.
	prod := render(t, readValues(t, productionFile))
	for owner, pod := range prod.podTemplates() {
		if pod.Spec.PriorityClassName != "driftguard" {
			t.Errorf("production: %s: priorityClassName %q, want the global driftguard", owner, pod.Spec.PriorityClassName)
		}
	}
}

func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// Changing secretsRevision gives every pod a new checksum/secrets, so they
// roll with a rotated Secret; the config's checksum stays, and without a
// revision there is no annotation.
func TestSecretsRevision(t *testing.T) {
	sums := func(r *rendered, key string) map[string]string {
		out := map[string]string{}
		for owner, pod := range r.podTemplates() {
			if !strings.HasPrefix(owner, "Job/") {
				out[owner] = pod.Annotations[key]
			}
		}
		return out
	}
	def := render(t, nil)
	for owner, sum := range sums(def, "checksum/secrets") {
		if sum != "" {
			t.Errorf("%s: checksum/secrets %q without a revision", owner, sum)
		}
	}
	first := render(t, valuesYAML(t, "secretsRevision: '2026-11-30'"))
	second := render(t, valuesYAML(t, "secretsRevision: '2026-12-01'"))
	a, b := sums(first, "checksum/secrets"), sums(second, "checksum/secrets")
	configA, configB := sums(first, "checksum/config"), sums(second, "checksum/config")
	for owner := range a {
		if len(a[owner]) != 64 || a[owner] == b[owner] {
			t.Errorf("%s: checksum/secrets %q then %q, want a new checksum with a new revision", owner, a[owner], b[owner])
		}
		if configA[owner] != configB[owner] {
			t.Errorf("%s: the config's checksum moved with the secrets' revision", owner)
		}
	}
}

// Chart.yaml names the oldest Kubernetes the chart's fields need, and it
// is the one the tests render for.
func TestKubeVersion(t *testing.T) {
	c := loadChart(t)
	if c.Metadata.KubeVersion == "" {
		t.Fatal("Chart.yaml has no kubeVersion")
	}
	for version, want := range map[string]bool{"v" + kubeVersion + ".0": true, "v1.33.2-eks-1234": true, "v1.29.9": false} {
		if got := chartutil.IsCompatibleRange(c.Metadata.KubeVersion, version); got != want {
			t.Errorf("kubeVersion %q accepts %s: %v, want %v", c.Metadata.KubeVersion, version, got, want)
		}
	}
}

// Every disruption budget lets a pod that is not ready be evicted, so a
// crash-looping pod never blocks a node drain; values may say otherwise.
func TestDisruptionBudgetsEvictUnhealthy(t *testing.T) {
	for name, r := range renders(t) {
		for _, p := range r.pdbs {
			if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
				t.Errorf("%s: PodDisruptionBudget %s: unhealthyPodEvictionPolicy %v, want AlwaysAllow", name, p.Name, p.Spec.UnhealthyPodEvictionPolicy)
			}
		}
	}
	r := render(t, valuesYAML(t, "sink: {pdb: {enabled: true, maxUnavailable: 1, unhealthyPodEvictionPolicy: IfHealthyBudget}}"))
	for _, p := range r.pdbs {
		want := policyv1.AlwaysAllow
		if p.Name == fullName("sink") {
			want = policyv1.IfHealthyBudget
		}
		if *p.Spec.UnhealthyPodEvictionPolicy != want {
			t.Errorf("PodDisruptionBudget %s: %s, want %s", p.Name, *p.Spec.UnhealthyPodEvictionPolicy, want)
		}
	}
}

// Every pod knows its name and namespace from the downward API
// (telemetry's pod and namespace tags).
func TestPodIdentity(t *testing.T) {
	for name, r := range renders(t) {
		pods := r.podTemplates()
		for _, p := range r.pods {
			pods["Pod/"+p.Name] = &corev1.PodTemplateSpec{Spec: p.Spec}
		}
		for owner, pod := range pods {
			for _, c := range allContainers(&pod.Spec) {
				env := envOf(c)
				for v, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
					if e := env[v]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
						t.Errorf("%s: %s %s: %s not from %s", name, owner, c.Name, v, field)
					}
				}
			}
		}
	}
}

// The Kafka and ClickHouse values reach every container that talks to
// them as the variables driftguard reads, secrets by secretKeyRef, and
// each file a variable names is mounted from the Secret it comes from.
func TestKafkaAndClickHouseSecurity(t *testing.T) {
	sec := render(t, readValues(t, securityFile))
	checkClientFiles(t, "security", sec)
	for owner, pod := range sec.podTemplates() {
		for _, c := range sec.driftguardContainers(&pod.Spec) {
			env := envOf(c)
			for v, want := range map[string]string{
				"DRIFTGUARD_KAFKA_TOPIC_PREFIX":    "team-a.",
				"DRIFTGUARD_KAFKA_GROUP_PREFIX":    "team-a.",
				"DRIFTGUARD_KAFKA_TLS_ENABLED":     "true",
				"DRIFTGUARD_KAFKA_TLS_CA_FILE":     "/var/run/secrets/driftguard/kafka/ca.crt",
				"DRIFTGUARD_KAFKA_TLS_CERT_FILE":   "/var/run/secrets/driftguard/kafka/tls.crt",
				"DRIFTGUARD_KAFKA_TLS_KEY_FILE":    "/var/run/secrets/driftguard/kafka/tls.key",
				"DRIFTGUARD_KAFKA_TLS_SERVER_NAME": "kafka-bootstrap.kafka.svc",
				"DRIFTGUARD_PYROSCOPE_TENANT_ID":   "123456",
			} {
				if env[v].Value != want {
					t.Errorf("%s %s: %s=%q, want %q", owner, c.Name, v, env[v].Value, want)
				}
			}
			clickhouse := c.Name == "sink" || c.Name == "migrate"
			for v, want := range map[string]string{
				"DRIFTGUARD_CLICKHOUSE_USERNAME":    "driftguard",
				"DRIFTGUARD_CLICKHOUSE_CLUSTER":     "analytics",
				"DRIFTGUARD_CLICKHOUSE_TLS_ENABLED": "true",
				"DRIFTGUARD_CLICKHOUSE_TLS_CA_FILE": "/var/run/secrets/driftguard/clickhouse/ca.crt",
			} {
				if got, has := env[v]; has != clickhouse || (clickhouse && got.Value != want) {
					t.Errorf("%s %s: %s=%q (present %v), want %q on the sink and migrate alone", owner, c.Name, v, got.Value, has, want)
				}
			}
			if e := env["DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "driftguard-pyroscope" {
				t.Errorf("%s %s: the Pyroscope password is not from its Secret", owner, c.Name)
			}
			if e := env["DRIFTGUARD_ADMIN_TOKEN"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "driftguard-admin" || e.ValueFrom.SecretKeyRef.Key != "tokens" {
				t.Errorf("%s %s: the admin tokens are not from their Secret", owner, c.Name)
			}
		}
	}
	// The production values: SCRAM over TLS with the system roots.
	prod := render(t, readValues(t, productionFile))
	checkClientFiles(t, "production", prod)
	for owner, pod := range prod.podTemplates() {
		for _, c := range allContainers(&pod.Spec) {
			env := envOf(c)
			if env["DRIFTGUARD_KAFKA_SASL_MECHANISM"].Value != "SCRAM-SHA-512" || env["DRIFTGUARD_KAFKA_SASL_USERNAME"].Value != "driftguard" {
				t.Errorf("%s %s: SASL %q as %q", owner, c.Name, env["DRIFTGUARD_KAFKA_SASL_MECHANISM"].Value, env["DRIFTGUARD_KAFKA_SASL_USERNAME"].Value)
			}
			if ref := env["DRIFTGUARD_KAFKA_SASL_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "driftguard-kafka" || ref.SecretKeyRef.Key != "password" {
				t.Errorf("%s %s: the SASL password is not from driftguard-kafka/password", owner, c.Name)
			}
			if _, has := env["DRIFTGUARD_KAFKA_TLS_CA_FILE"]; has || env["DRIFTGUARD_KAFKA_TLS_ENABLED"].Value != "true" {
				t.Errorf("%s %s: want TLS on the system roots", owner, c.Name)
			}
		}
	}
	// OAUTHBEARER: the token is a file from its Secret.
	oauth := render(t, valuesYAML(t, "kafka: {sasl: {mechanism: OAUTHBEARER, tokenSecret: {name: confluent-token, key: jwt}}}"))
	checkClientFiles(t, "oauth", oauth)
	env := envOf(oauth.deployment(t, "ingest").Spec.Template.Spec.Containers[0])
	if env["DRIFTGUARD_KAFKA_SASL_TOKEN_FILE"].Value != "/var/run/secrets/driftguard/kafka/token" {
		t.Errorf("OAUTHBEARER: token file %q", env["DRIFTGUARD_KAFKA_SASL_TOKEN_FILE"].Value)
	}
	if _, has := env["DRIFTGUARD_KAFKA_SASL_PASSWORD"]; has {
		t.Error("OAUTHBEARER: a password variable without a password Secret")
	}
	// Nothing of it by default.
	for owner, pod := range render(t, nil).podTemplates() {
		for _, c := range allContainers(&pod.Spec) {
			for _, e := range c.Env {
				if strings.Contains(e.Name, "_TLS_") || strings.Contains(e.Name, "_SASL_") || strings.Contains(e.Name, "_PREFIX") {
					t.Errorf("default: %s %s sets %s", owner, c.Name, e.Name)
				}
			}
		}
	}
}

// checkClientFiles checks that every *_FILE variable of a container names
// a file of a Secret projected into a volume the container mounts
// read-only there.
func checkClientFiles(t *testing.T, name string, r *rendered) {
	t.Helper()
	for owner, pod := range r.podTemplates() {
		files := map[string]string{} // path in the container: Secret/key
		for _, c := range allContainers(&pod.Spec) {
			for _, m := range c.VolumeMounts {
				for _, v := range pod.Spec.Volumes {
					if v.Name != m.Name || v.Projected == nil {
						continue
					}
					if !m.ReadOnly {
						t.Errorf("%s: %s %s mounts %s writable", name, owner, c.Name, v.Name)
					}
					for _, src := range v.Projected.Sources {
						for _, item := range src.Secret.Items {
							files[m.MountPath+"/"+item.Path] = src.Secret.Name + "/" + item.Key
						}
					}
				}
			}
			for _, e := range c.Env {
				if strings.HasSuffix(e.Name, "_FILE") && strings.HasPrefix(e.Name, "DRIFTGUARD_") {
					if _, ok := files[e.Value]; !ok {
						t.Errorf("%s: %s %s: %s=%s, which no mounted Secret holds (%v)", name, owner, c.Name, e.Name, e.Value, files)
					}
				}
			}
			clear(files)
		}
	}
}

// processors.createTopics false: the processors run with --no-create and
// the setup hook checks the topics instead of creating them.
func TestCreateTopics(t *testing.T) {
	for name, r := range map[string]*rendered{"default": render(t, nil), "security": render(t, readValues(t, securityFile))} {
		create := name == "default"
		for _, s := range r.statefulSets {
			if has := slices.Contains(s.Spec.Template.Spec.Containers[0].Args, "--no-create"); has == create {
				t.Errorf("%s: %s args %v", name, s.Name, s.Spec.Template.Spec.Containers[0].Args)
			}
		}
		want := []string{"topics"}
		if !create {
			want = []string{"topics", "--check"}
		}
		if got := r.jobs[0].Spec.Template.Spec.InitContainers[0].Args; !slices.Equal(got, want) {
			t.Errorf("%s: the hook runs %v, want %v", name, got, want)
		}
	}
}

// The schema refuses secrets written into values: they come from
// existing Secrets only.
func TestSchemaRefusesInlineSecrets(t *testing.T) {
	c := loadChart(t)
	for _, bad := range []string{
		"kafka: {sasl: {mechanism: PLAIN, username: u, password: hunter2}}",
		"kafka: {tls: {enabled: true, key: '-----BEGIN PRIVATE KEY-----'}}",
		"clickhouse: {password: hunter2}",
		"clickhouse: {tls: {enabled: true, cert: {secretName: s, key: '-----BEGIN PRIVATE KEY-----'}}}",
		"pyroscope: {basicAuth: {username: u, password: hunter2}}",
		"config: {clickhouse: {username: u}}",
		"config: {kafka: {sasl: {password: hunter2}}}",
		"config: {telemetry: {pyroscope_basic_auth_password: hunter2}}",
		"kafka: {sasl: {mechanism: KERBEROS}}",
		"kafka: {topicPrefix: 'team a'}",
		"clickhouse: {addr: 'a:9000, b:9000'}",
	} {
		if _, _, err := renderValues(c, valuesYAML(t, bad)); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %s: %v, want the schema to refuse them", bad, err)
		}
	}
}

// `helm test`: one Pod, a test hook, running `driftguard probe` with the
// chart's image: a signed webhook to the ingest Service's port and the
// /readyz of every component on a port that serves it.
func TestHelmTestPod(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			if len(r.pods) != 1 {
				t.Fatalf("%d Pods, want the test", len(r.pods))
			}
			pod := r.pods[0]
			if r.annotations["Pod/"+pod.Name]["helm.sh/hook"] != "test" {
				t.Errorf("Pod %s is not a test hook: %v", pod.Name, r.annotations["Pod/"+pod.Name])
			}
			if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || len(pod.Spec.Containers) != 1 {
				t.Fatalf("Pod %s: restart %s, %d containers", pod.Name, pod.Spec.RestartPolicy, len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			checkResources(t, "test pod", c)
			checkSecurity(t, "test pod", c)
			if c.Image != r.deployment(t, "ingest").Spec.Template.Spec.Containers[0].Image || c.Args[0] != "probe" {
				t.Errorf("test pod runs %s %v, want driftguard probe on the chart's image", c.Image, c.Args)
			}
			flags := map[string][]string{}
			for i := 1; i+1 < len(c.Args); i += 2 {
				flags[c.Args[i]] = append(flags[c.Args[i]], c.Args[i+1])
			}
			// The webhook: to the ingest Service, signed with the stream's secret.
			u, err := url.Parse(flags["--webhook"][0])
			if err != nil {
				t.Fatal(err)
			}
			if svc, port := serviceAt(t, r, u); svc == nil || svc.Name != fullName("ingest") || port.Name != "http" {
				t.Errorf("--webhook %s is not the ingest Service's webhook port", u)
			}
			secret := envOf(c)[flags["--secret-env"][0]]
			ingestEnv := envOf(r.deployment(t, "ingest").Spec.Template.Spec.Containers[0])
			if want := ingestEnv["DRIFTGUARD_SECRETS_"+strings.ToUpper(flags["--stream"][0])]; secret.ValueFrom == nil ||
				*secret.ValueFrom.SecretKeyRef != *want.ValueFrom.SecretKeyRef {
				t.Errorf("the test signs with %+v, ingest verifies with %+v", secret.ValueFrom, want.ValueFrom)
			}
			// /readyz of every workload, on the port of its readiness probe.
			probed := map[string]bool{}
			for _, ready := range flags["--ready"] {
				u, err := url.Parse(ready)
				if err != nil || u.Path != "/readyz" {
					t.Errorf("--ready %s", ready)
					continue
				}
				for _, w := range readyTargets(t, r, u) {
					probed[w] = true
				}
			}
			for _, w := range r.workloads() {
				if !probed[w.name] {
					t.Errorf("the test does not read /readyz of %s (probed %v)", w.name, probed)
				}
			}
		})
	}
	if len(render(t, valuesYAML(t, "tests: {enabled: false}")).pods) != 0 {
		t.Error("a test Pod with tests.enabled false")
	}
}

// serviceAt finds the Service and port a URL of the release's namespace
// names (<service>.<namespace>.svc:<port>).
func serviceAt(t *testing.T, r *rendered, u *url.URL) (*corev1.Service, *corev1.ServicePort) {
	t.Helper()
	svcName, ok := strings.CutSuffix(u.Hostname(), "."+namespace+".svc")
	port, _ := strconv.Atoi(u.Port())
	svc := r.service(svcName)
	if !ok || svc == nil {
		return nil, nil
	}
	for i, p := range svc.Spec.Ports {
		if int(p.Port) == port {
			return svc, &svc.Spec.Ports[i]
		}
	}
	return nil, nil
}

// readyTargets are the workloads a /readyz URL reaches on the port their
// readiness probe reads: through a Service, or a StatefulSet's first pod
// by its name under its governing Service.
func readyTargets(t *testing.T, r *rendered, u *url.URL) []string {
	t.Helper()
	host := u.Hostname()
	var out []string
	check := func(name string, pod *corev1.PodTemplateSpec, port int) {
		c := pod.Spec.Containers[0]
		if got := resolvePort(c, c.ReadinessProbe.HTTPGet.Port); int(got) != port {
			t.Errorf("%s: /readyz read on %d, its probe reads %d", u, port, got)
		}
		out = append(out, name)
	}
	for _, s := range r.statefulSets {
		if host == fmt.Sprintf("%s-0.%s.%s.svc", s.Name, s.Spec.ServiceName, namespace) {
			port, _ := strconv.Atoi(u.Port())
			check(s.Name, &s.Spec.Template, port)
			return out
		}
	}
	svc, port := serviceAt(t, r, u)
	if svc == nil {
		t.Errorf("--ready %s names no Service port of the release", u)
		return nil
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for _, w := range r.workloads() {
		if sel.Matches(labels.Set(w.pod.Labels)) {
			check(w.name, w.pod, int(resolvePort(w.pod.Spec.Containers[0], port.TargetPort)))
		}
	}
	return out
}

// driftguardContainers are the containers of a pod that run driftguard's
// image (not the sidecars and init containers users add).
func (r *rendered) driftguardContainers(spec *corev1.PodSpec) []corev1.Container {
	repo, _ := r.values.PathValue("Values.image.repository")
	return slices.DeleteFunc(allContainers(spec), func(c corev1.Container) bool {
		return !strings.HasPrefix(c.Image, fmt.Sprint(repo)+":")
	})
}
