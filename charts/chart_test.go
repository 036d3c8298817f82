package charts

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/driftguard/driftguard/internal/config"
)

// Both renders every test holds to the same invariants.
func renders(t *testing.T) map[string]*rendered {
	t.Helper()
	return map[string]*rendered{
		"default":    render(t, nil),
		"production": render(t, readValues(t, productionFile)),
	}
}

func TestWorkloads(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			for _, c := range []string{"ingest", "sink", "bridge"} {
				d := r.deployment(t, c)
				if want := "driftguard.dev/group"; d.Spec.Template.Labels[want] != "" {
					t.Errorf("Deployment %s carries %s", d.Name, want)
				}
			}
			if len(r.statefulSets) == 0 {
				t.Fatal("no processor StatefulSet")
			}
			if len(r.jobs) != 1 {
				t.Fatalf("%d Jobs, want the setup hook alone", len(r.jobs))
			}
		})
	}
}

// Processors are StatefulSets, one per group, each running its streams,
// with a PVC per pod for the tables (or emptyDir when chosen).
func TestProcessorGroups(t *testing.T) {
	prod := render(t, readValues(t, productionFile))
	groups := map[string][]string{}
	for _, s := range prod.statefulSets {
		c := s.Spec.Template.Spec.Containers[0]
		if c.Args[0] != "process" {
			t.Errorf("StatefulSet %s runs %v", s.Name, c.Args)
		}
		if len(c.Args) != 3 || c.Args[1] != "--streams" {
			t.Fatalf("StatefulSet %s: args %v, want process --streams a,b", s.Name, c.Args)
		}
		groups[s.Name] = strings.Split(c.Args[2], ",")
		checkTableStorage(t, s, "persistentVolumeClaim", "")
		if got := s.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; got == nil || *got != "fast-ssd" {
			t.Errorf("StatefulSet %s: storage class %v", s.Name, got)
		}
	}
	want := map[string][]string{
		fullName("processor-presence"): {"presence"},
		fullName("processor-others"):   {"chat", "orders", "subscriptions", "workflow"},
	}
	if len(groups) != len(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	for name, streams := range want {
		if !slices.Equal(groups[name], streams) {
			t.Errorf("%s runs %v, want %v", name, groups[name], streams)
		}
	}
	if r := *prod.statefulSets[0].Spec.Replicas + *prod.statefulSets[1].Spec.Replicas; r != 6 {
		t.Errorf("replicas of both groups: %d, want 4+2", r)
	}

	def := render(t, nil)
	if len(def.statefulSets) != 1 {
		t.Fatalf("default: %d StatefulSets, want one for every stream", len(def.statefulSets))
	}
	if args := def.statefulSets[0].Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"process"}) {
		t.Errorf("default group runs %v, want every stream", args)
	}
	checkTableStorage(t, def.statefulSets[0], "persistentVolumeClaim", "")

	empty := render(t, valuesYAML(t, "processors: {storage: {type: emptyDir, emptyDirSizeLimit: 5Gi}}"))
	checkTableStorage(t, empty.statefulSets[0], "emptyDir", "5Gi")
	if !strings.Contains(empty.notes, "rebuilds them from the") {
		t.Error("NOTES.txt does not say that emptyDir tables are rebuilt on restart")
	}
	// Without a size limit the volume is still an emptyDir: `emptyDir:
	// null` would leave the volume without a source, which the API server
	// refuses.
	unbounded := render(t, valuesYAML(t, "processors: {storage: {type: emptyDir}}"))
	checkTableStorage(t, unbounded.statefulSets[0], "emptyDir", "")

	// A group of replicas 0 is stopped, not run with one.
	stopped := render(t, valuesYAML(t, "processors: {groups: [{name: a, streams: [presence], replicas: 0}, {name: b, streams: [chat, orders, workflow]}]}"))
	for _, s := range stopped.statefulSets {
		want := map[string]int32{fullName("processor-a"): 0, fullName("processor-b"): 1}[s.Name]
		if *s.Spec.Replicas != want {
			t.Errorf("StatefulSet %s: %d replicas, want %d", s.Name, *s.Spec.Replicas, want)
		}
	}
}

// checkTableStorage checks a processor StatefulSet's table storage: kind,
// and for emptyDir its size limit ("" for none).
func checkTableStorage(t *testing.T, s *appsv1.StatefulSet, kind, sizeLimit string) {
	t.Helper()
	if !slices.ContainsFunc(s.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool {
		return e.Name == "DRIFTGUARD_INSTANCE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("StatefulSet %s: DRIFTGUARD_INSTANCE_ID is not the pod's name (the transactional ids must be stable per pod)", s.Name)
	}
	mounted := false
	for _, m := range s.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "data" && m.MountPath == "/var/lib/driftguard" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("StatefulSet %s does not mount data at /var/lib/driftguard", s.Name)
	}
	var dataVolume *corev1.Volume
	for i, v := range s.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			dataVolume = &s.Spec.Template.Spec.Volumes[i]
		}
	}
	switch kind {
	case "persistentVolumeClaim":
		if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "data" {
			t.Errorf("StatefulSet %s: no volumeClaimTemplate data", s.Name)
		}
		if dataVolume != nil {
			t.Errorf("StatefulSet %s: a data volume besides the claim template", s.Name)
		}
	case "emptyDir":
		if len(s.Spec.VolumeClaimTemplates) != 0 {
			t.Errorf("StatefulSet %s: a volumeClaimTemplate with emptyDir storage", s.Name)
		}
		switch {
		case dataVolume == nil || dataVolume.EmptyDir == nil:
			t.Errorf("StatefulSet %s: data volume %+v, want an emptyDir", s.Name, dataVolume)
		case sizeLimit == "" && dataVolume.EmptyDir.SizeLimit != nil:
			t.Errorf("StatefulSet %s: emptyDir size limit %s, want none", s.Name, dataVolume.EmptyDir.SizeLimit)
		case sizeLimit != "" && (dataVolume.EmptyDir.SizeLimit == nil || dataVolume.EmptyDir.SizeLimit.String() != sizeLimit):
			t.Errorf("StatefulSet %s: emptyDir size limit %v, want %s", s.Name, dataVolume.EmptyDir.SizeLimit, sizeLimit)
		}
	}
	if env := envOf(s.Spec.Template.Spec.Containers[0])["DRIFTGUARD_DATA_DIR"]; env.Value != "/var/lib/driftguard" {
		t.Errorf("StatefulSet %s: DRIFTGUARD_DATA_DIR=%q", s.Name, env.Value)
	}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(slices.Clone(spec.InitContainers), spec.Containers...)
}

// Every container: resources, the restricted security context, /tmp
// writable; every long-running one: liveness and readiness probes on its
// ops port.
func TestContainers(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			for owner, pod := range r.podTemplates() {
				spec := &pod.Spec
				if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
					t.Errorf("%s: pod securityContext without runAsNonRoot", owner)
				}
				if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
					t.Errorf("%s mounts a service account token", owner)
				}
				for _, c := range allContainers(spec) {
					where := owner + " container " + c.Name
					checkResources(t, where, c)
					checkSecurity(t, where, c)
					if !mounts(c, "tmp", "/tmp") || !mounts(c, "config", "/etc/driftguard") {
						t.Errorf("%s: /tmp and /etc/driftguard not both mounted", where)
					}
					if e := envOf(c)["DRIFTGUARD_CONFIG"]; e.Value != "/etc/driftguard/config.yaml" {
						t.Errorf("%s: DRIFTGUARD_CONFIG=%q", where, e.Value)
					}
					if strings.HasPrefix(owner, "Job/") {
						continue
					}
					checkProbes(t, where, c)
				}
			}
		})
	}
}

func mounts(c corev1.Container, volume, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume && m.MountPath == path {
			return true
		}
	}
	return false
}

func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[res]
		lim, hasLim := c.Resources.Limits[res]
		if !hasReq || !hasLim {
			t.Errorf("%s: %s request or limit missing", where, res)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above its limit %s", where, res, req.String(), lim.String())
		}
	}
}

func checkSecurity(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: no securityContext", where)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("%s: runAsNonRoot not true", where)
	case sc.RunAsUser == nil || *sc.RunAsUser != 65532:
		t.Errorf("%s: runAsUser not 65532", where)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: root filesystem writable", where)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation allowed", where)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities %+v, want drop ALL", where, sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccomp profile not RuntimeDefault", where)
	}
}

// opsPort is the port of each container's /metrics, /healthz and /readyz.
var opsPort = map[string]int32{"ingest": 9464, "process": 9464, "sink": 9464, "relay": 9464, "bridge": 9464}

func checkProbes(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	want, ok := opsPort[c.Name]
	if !ok {
		t.Errorf("%s: a container the tests do not know", where)
		return
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP probe on %s", where, probe)
			continue
		}
		if p.HTTPGet.Path != probe {
			t.Errorf("%s: probe on %s, want %s", where, p.HTTPGet.Path, probe)
		}
		if got := resolvePort(c, p.HTTPGet.Port); got != want {
			t.Errorf("%s: %s probed on port %d, want %d", where, probe, got, want)
		}
	}
}

func resolvePort(c corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	return -1
}

// The listeners the chart sets: webhooks on 8080, ops on 9464 (the
// bridge's too), the bridge on 8090.
func TestListeners(t *testing.T) {
	r := render(t, nil)
	want := map[string]map[string]string{
		"ingest": {"DRIFTGUARD_HTTP_ADDR": ":8080", "DRIFTGUARD_TELEMETRY_ADDR": ":9464"},
		"sink":   {"DRIFTGUARD_TELEMETRY_ADDR": ":9464"},
		"bridge": {"DRIFTGUARD_BRIDGE_ADDR": ":8090", "DRIFTGUARD_TELEMETRY_ADDR": ":9464"},
	}
	for component, vars := range want {
		env := envOf(r.deployment(t, component).Spec.Template.Spec.Containers[0])
		for name, value := range vars {
			if env[name].Value != value {
				t.Errorf("%s: %s=%q, want %q", component, name, env[name].Value, value)
			}
		}
	}
	env := envOf(r.statefulSets[0].Spec.Template.Spec.Containers[0])
	if env["DRIFTGUARD_TELEMETRY_ADDR"].Value != ":9464" {
		t.Errorf("processors: DRIFTGUARD_TELEMETRY_ADDR=%q", env["DRIFTGUARD_TELEMETRY_ADDR"].Value)
	}
}

// The public ingest Service and its Ingress carry the webhook port alone;
// the ops port is reachable only through the metrics Services, which no
// Ingress routes.
func TestPublicPorts(t *testing.T) {
	r := render(t, readValues(t, productionFile))
	if strings.Contains(r.notes, "WARNING") {
		t.Errorf("NOTES.txt warns of the production values, which list the ingress controller as a trusted proxy:\n%s", r.notes)
	}
	// An Ingress before a component with no trusted proxies: every client
	// would share the controller's per-source limits.
	bare := render(t, valuesYAML(t, `
ingest: {ingress: {enabled: true, hosts: [{host: webhooks.example.com, paths: [{path: /v1/webhooks/, pathType: Prefix}]}]}}
bridge: {enabled: true, ingress: {enabled: true, hosts: [{host: app.example.com, paths: [{path: /v1/, pathType: Prefix}]}]}}
config: {bridge: {allowed_origins: [https://app.example.com]}}`))
	for _, want := range []string{"WARNING: ingest is behind an Ingress, and config.http.trusted_proxies", "WARNING: bridge is behind an Ingress, and config.bridge.trusted_proxies"} {
		if !strings.Contains(bare.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, bare.notes)
		}
	}
	ingest := r.deployment(t, "ingest").Spec.Template.Spec.Containers[0]
	pub := r.service(fullName("ingest"))
	if pub == nil {
		t.Fatal("no ingest Service")
	}
	if len(pub.Spec.Ports) != 1 || pub.Spec.Ports[0].Port != 8080 || resolvePort(ingest, pub.Spec.Ports[0].TargetPort) != 8080 {
		t.Errorf("ingest Service ports %+v, want 8080 alone", pub.Spec.Ports)
	}
	for _, s := range r.services {
		metricsService := strings.HasSuffix(s.Name, "-metrics")
		if metricsService != (s.Labels["driftguard.dev/metrics"] == "true") {
			t.Errorf("Service %s: the metrics label on the wrong Service", s.Name)
		}
		for _, p := range s.Spec.Ports {
			if !metricsService && (p.Port == 9464 || p.TargetPort.String() == "metrics" || p.TargetPort.IntValue() == 9464) {
				t.Errorf("Service %s exposes the ops port: %+v", s.Name, p)
			}
		}
	}
	if len(r.ingresses) != 2 {
		t.Fatalf("%d Ingresses, want ingest and bridge", len(r.ingresses))
	}
	for _, ing := range r.ingresses {
		for _, rule := range ing.Spec.Rules {
			for _, p := range rule.HTTP.Paths {
				backend := p.Backend.Service
				svc := r.service(backend.Name)
				if svc == nil || strings.HasSuffix(backend.Name, "-metrics") {
					t.Errorf("Ingress %s routes to %s", ing.Name, backend.Name)
					continue
				}
				if backend.Port.Name != "http" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" {
					t.Errorf("Ingress %s: backend port %+v", ing.Name, backend.Port)
				}
				if backend.Name == fullName("ingest") && svc.Spec.Ports[0].Port != 8080 {
					t.Errorf("Ingress %s reaches ingest on %d", ing.Name, svc.Spec.Ports[0].Port)
				}
				// The bridge serves /metrics, /healthz and /readyz on its
				// one port: no path may route them.
				for _, ops := range []string{"/metrics", "/healthz", "/readyz"} {
					if routes(p, ops) {
						t.Errorf("Ingress %s: path %s (%s) routes %s", ing.Name, p.Path, *p.PathType, ops)
					}
				}
			}
		}
	}
}

// routes reports whether an Ingress path sends a request for target to
// its backend (Prefix matches whole path elements).
func routes(p networkingv1.HTTPIngressPath, target string) bool {
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return p.Path == target
	}
	prefix := strings.TrimSuffix(p.Path, "/")
	return prefix == "" || target == prefix || strings.HasPrefix(target, prefix+"/")
}

// The config file is a valid driftguard config, loaded with driftguard's
// own loader and the variables the pods get, without unknown keys; every
// stream has a webhook secret and belongs to a processor group.
func TestConfigIsValid(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			for _, cmName := range []string{fullName("config"), fullName("hook-config")} {
				cm := r.configMap(t, cmName)
				for owner, pod := range r.podTemplates() {
					for _, c := range allContainers(&pod.Spec) {
						if !usesConfigMap(pod, cmName) {
							continue
						}
						cfg, err := config.Load(writeConfig(t, cm), environ(c))
						if err != nil {
							t.Fatalf("%s container %s: config.Load: %v", owner, c.Name, err)
						}
						if len(cfg.Warnings) > 0 {
							t.Errorf("%s: config warnings: %v", cmName, cfg.Warnings)
						}
						checkCatalogue(t, r, cfg)
					}
				}
			}
		})
	}
}

func usesConfigMap(pod *corev1.PodTemplateSpec, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return true
		}
	}
	return false
}

// environ is what a container's driftguard sees: its plain variables, and
// for each from a Secret a well-formed stand-in.
func environ(c corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		value := e.Value
		if e.ValueFrom != nil {
			switch {
			case strings.HasPrefix(e.Name, "DRIFTGUARD_SECRETS_"):
				value = "whsec_c2VjcmV0LW9mLWF0LWxlYXN0LTI0LWJ5dGVzLW9r"
			default:
				value = strings.Repeat("k", 32)
			}
		}
		env = append(env, e.Name+"="+value)
	}
	return env
}

func checkCatalogue(t *testing.T, r *rendered, cfg *config.Config) {
	t.Helper()
	ingest := envOf(r.deployment(t, "ingest").Spec.Template.Spec.Containers[0])
	grouped := map[string]bool{}
	all := false
	for _, s := range r.statefulSets {
		args := s.Spec.Template.Spec.Containers[0].Args
		if len(args) == 1 {
			all = true
		}
		for i := range args {
			if args[i] == "--streams" {
				for _, name := range strings.Split(args[i+1], ",") {
					if cfg.Streams[name] == nil {
						t.Errorf("StatefulSet %s runs stream %s, which the catalogue lacks", s.Name, name)
					}
					grouped[name] = true
				}
			}
		}
	}
	for _, name := range cfg.StreamNames() {
		if _, ok := ingest["DRIFTGUARD_SECRETS_"+strings.ToUpper(name)]; !ok {
			t.Errorf("stream %s has no webhook secret: ingest would refuse to start", name)
		}
		if !all && !grouped[name] {
			t.Errorf("stream %s is in no processor group", name)
		}
	}
}

// Secrets reach pods only through secretKeyRef; no ConfigMap holds one.
func TestSecretsOnlyFromSecrets(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			secretVar := func(n string) bool {
				return strings.HasPrefix(n, "DRIFTGUARD_SECRETS_") || strings.HasSuffix(n, "_PASSWORD") || n == "DRIFTGUARD_BRIDGE_SECRET" || n == "DRIFTGUARD_BRIDGE_HS256_KEYS" || n == "DRIFTGUARD_ADMIN_TOKEN"
			}
			seen := map[string]bool{}
			for owner, pod := range r.podTemplates() {
				for _, c := range allContainers(&pod.Spec) {
					for _, e := range c.Env {
						if strings.Contains(e.Value, "whsec_") {
							t.Errorf("%s %s: %s holds a secret in plain text", owner, c.Name, e.Name)
						}
						if !secretVar(e.Name) {
							continue
						}
						seen[e.Name] = true
						if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
							t.Errorf("%s %s: %s not from a secretKeyRef", owner, c.Name, e.Name)
						}
					}
					if len(c.EnvFrom) > 0 {
						t.Errorf("%s %s: envFrom", owner, c.Name)
					}
				}
			}
			if !seen["DRIFTGUARD_BRIDGE_SECRET"] || !seen["DRIFTGUARD_SECRETS_PRESENCE"] {
				t.Errorf("secret variables seen: %v", seen)
			}
			for _, cm := range r.configMaps {
				for key, data := range cm.Data {
					for _, bad := range []string{"whsec_", "password", "secrets:", "secret:"} {
						if strings.Contains(data, bad) {
							t.Errorf("ConfigMap %s %s contains %q", cm.Name, key, bad)
						}
					}
				}
			}
		})
	}
	// The production values: each stream from its own Secret, the
	// ClickHouse password to the sink and migrate alone.
	r := render(t, readValues(t, productionFile))
	want := map[string][2]string{
		"DRIFTGUARD_SECRETS_PRESENCE":      {"driftguard-webhooks-presence", "secrets"},
		"DRIFTGUARD_SECRETS_SUBSCRIPTIONS": {"driftguard-webhooks-billing", "subscriptions"},
	}
	env := envOf(r.deployment(t, "ingest").Spec.Template.Spec.Containers[0])
	for name, ref := range want {
		got := env[name].ValueFrom.SecretKeyRef
		if got.Name != ref[0] || got.Key != ref[1] {
			t.Errorf("%s from %s/%s, want %s/%s", name, got.Name, got.Key, ref[0], ref[1])
		}
	}
	if b := envOf(r.deployment(t, "bridge").Spec.Template.Spec.Containers[0])["DRIFTGUARD_BRIDGE_SECRET"]; b.ValueFrom.SecretKeyRef.Name != "driftguard-bridge-jwt" {
		t.Errorf("bridge secret from %s", b.ValueFrom.SecretKeyRef.Name)
	}
	for owner, pod := range r.podTemplates() {
		for _, c := range allContainers(&pod.Spec) {
			_, has := envOf(c)["DRIFTGUARD_CLICKHOUSE_PASSWORD"]
			if has != (c.Name == "sink" || c.Name == "migrate") {
				t.Errorf("%s %s: DRIFTGUARD_CLICKHOUSE_PASSWORD present: %v", owner, c.Name, has)
			}
			_, hasPyroscope := envOf(c)["DRIFTGUARD_PYROSCOPE_ADDR"]
			if !hasPyroscope {
				t.Errorf("%s %s: no DRIFTGUARD_PYROSCOPE_ADDR with pyroscope.addr set", owner, c.Name)
			}
		}
	}
}

// The schema keeps secrets out of the config map and refuses misspelt keys.
func TestSchemaRefuses(t *testing.T) {
	c := loadChart(t)
	for _, bad := range []string{
		"ingest: {replicaCont: 3}",
		"ingres: {enabled: true}",
		"processors: {groups: [{name: all, streams: [], replica: 2}]}",
		"processors: {storage: {type: hostPath}}",
		"serviceMonitor: {enabeld: true}",
		"config: {kafka: {brokerz: [a:9092]}}",
		"config: {kafka: {brokers: [a:9092]}}",
		"config: {http: {addr: ':8081'}}",
		"config: {clickhouse: {password: hunter2}}",
		"config: {bridge: {secret: 0123456789abcdef0123456789abcdef}}",
		"config: {bridge: {tokens: {hs256_keys: 'k1:0123456789abcdef0123456789abcdef'}}}",
		"config: {streams: {presence: {signature: {secrets: [whsec_c2VjcmV0LW9mLWF0LWxlYXN0LTI0LWJ5dGVzLW9r]}}}}",
		"config: {telemetry: {log_level: verbose}}",
		"webhookSecrets: {tickets: {name: s}}",
		"webhookSecrets: {Presence: {name: s, key: k}}",
		"kafka: {brokers: [kafka]}",
	} {
		if _, _, err := renderValues(c, valuesYAML(t, bad)); err == nil {
			t.Errorf("values %s: rendered, want the schema to refuse them", bad)
		} else if !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %s: %v, want a schema error", bad, err)
		}
	}
}

// The chart refuses what driftguard would refuse to run.
func TestRenderRefuses(t *testing.T) {
	c := loadChart(t)
	for bad, why := range map[string]string{
		"config: {streams: {tickets: {policy: latest}}}":                                         "has no webhook secret",
		"processors: {groups: [{name: a, streams: [presence]}, {name: b, streams: [presence]}]}": "in two groups",
		"processors: {groups: [{name: a, streams: []}, {name: b, streams: [presence]}]}":         "overlaps",
		"bridge: {secret: {name: '', key: k}}":                                                   "schema",
	} {
		_, _, err := renderValues(c, valuesYAML(t, bad))
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("values %s: %v, want an error saying %q", bad, err, why)
		}
	}
}

// A pod is given more time to stop than its preStop drain, then ingest's
// last produce and the sink's last flush (a batch period plus one insert)
// take.
func TestGracePeriod(t *testing.T) {
	const insert = 10 * time.Second
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(writeConfig(t, r.configMap(t, fullName("config"))), nil)
			if err != nil {
				t.Fatal(err)
			}
			for owner, pod := range r.podTemplates() {
				if strings.HasPrefix(owner, "Job/") {
					continue
				}
				drain := preStopSleep(pod.Spec.Containers[0])
				need := drain + cfg.Kafka.ProduceTimeout + cfg.ClickHouse.BatchPeriod + insert
				g := pod.Spec.TerminationGracePeriodSeconds
				if g == nil {
					t.Errorf("%s: no terminationGracePeriodSeconds", owner)
				} else if time.Duration(*g)*time.Second <= need {
					t.Errorf("%s: terminationGracePeriodSeconds %d, want more than %s (preStop %s + produce_timeout %s + batch_period %s + an insert)",
						owner, *g, need, drain, cfg.Kafka.ProduceTimeout, cfg.ClickHouse.BatchPeriod)
				}
			}
		})
	}
}

// preStopSleep is how long a container's preStop sleep action holds it.
func preStopSleep(c corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		return 0
	}
	return time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
}

// The setup Job runs topics, then migrate, as a pre-install/pre-upgrade
// hook, after the hook ConfigMap it reads.
func TestHookJob(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			job := r.jobs[0]
			ann := r.annotations["Job/"+job.Name]
			checkHook(t, "Job/"+job.Name, ann)
			spec := job.Spec.Template.Spec
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Args[0] != "topics" {
				t.Errorf("init containers %v, want topics", spec.InitContainers)
			}
			if len(spec.Containers) != 1 || spec.Containers[0].Args[0] != "migrate" {
				t.Errorf("containers %v, want migrate", spec.Containers)
			}
			if spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("restartPolicy %s", spec.RestartPolicy)
			}
			if spec.ServiceAccountName == fullName("") || spec.ServiceAccountName == releaseName+"-driftguard" {
				t.Errorf("the hook uses the chart's ServiceAccount, which does not exist yet at pre-install")
			}
			var cmName string
			for _, v := range spec.Volumes {
				if v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
			cmAnn := r.annotations["ConfigMap/"+cmName]
			checkHook(t, "ConfigMap/"+cmName, cmAnn)
			cmWeight, _ := strconv.Atoi(cmAnn["helm.sh/hook-weight"])
			jobWeight, _ := strconv.Atoi(ann["helm.sh/hook-weight"])
			if cmWeight >= jobWeight {
				t.Errorf("hook ConfigMap weight %d not below the Job's %d", cmWeight, jobWeight)
			}
			if r.configMap(t, cmName).Data["config.yaml"] != r.configMap(t, fullName("config")).Data["config.yaml"] {
				t.Error("the hook's config differs from the pods'")
			}
		})
	}
	noSink := render(t, valuesYAML(t, "sink: {enabled: false}"))
	spec := noSink.jobs[0].Spec.Template.Spec
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 || spec.Containers[0].Args[0] != "topics" {
		t.Errorf("without the sink: init %v, containers %v, want topics alone", spec.InitContainers, spec.Containers)
	}
}

func checkHook(t *testing.T, what string, ann map[string]string) {
	t.Helper()
	hooks := strings.Split(ann["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") {
		t.Errorf("%s: helm.sh/hook %q", what, ann["helm.sh/hook"])
	}
	policy := strings.Split(ann["helm.sh/hook-delete-policy"], ",")
	if !slices.Contains(policy, "before-hook-creation") || !slices.Contains(policy, "hook-succeeded") {
		t.Errorf("%s: helm.sh/hook-delete-policy %q", what, ann["helm.sh/hook-delete-policy"])
	}
	if _, err := strconv.Atoi(ann["helm.sh/hook-weight"]); err != nil {
		t.Errorf("%s: helm.sh/hook-weight %q", what, ann["helm.sh/hook-weight"])
	}
}

// Pods carry the config's checksum, which changes with the catalogue.
func TestConfigChecksum(t *testing.T) {
	checksums := func(r *rendered) map[string]string {
		out := map[string]string{}
		for owner, pod := range r.podTemplates() {
			if strings.HasPrefix(owner, "Job/") {
				continue
			}
			sum := pod.Annotations["checksum/config"]
			if len(sum) != 64 {
				t.Errorf("%s: checksum/config %q", owner, sum)
			}
			out[owner] = sum
		}
		return out
	}
	base := checksums(render(t, nil))
	again := checksums(render(t, nil))
	partitions := checksums(render(t, valuesYAML(t, "config: {streams: {presence: {limits: {partitions: 12}}}}")))
	added := checksums(render(t, valuesYAML(t, `
config: {streams: {tickets: {policy: latest, key: /id, event_id: /id, type: {fixed: t}, schemas: {t: t.schema.json}}}}
webhookSecrets: {tickets: {name: s, key: k}}
schemas: {t.schema.json: '{"type": "object"}'}
`)))
	for owner, sum := range base {
		if again[owner] != sum {
			t.Errorf("%s: the same values gave checksums %s and %s", owner, sum, again[owner])
		}
		if partitions[owner] == sum || added[owner] == sum {
			t.Errorf("%s: checksum unchanged by a change of the catalogue", owner)
		}
	}
}

// Anti-affinity, disruption budgets and autoscalers for each workload.
func TestAvailability(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			type workload struct {
				selector map[string]string
				pod      *corev1.PodTemplateSpec
			}
			workloads := map[string]workload{}
			for _, d := range r.deployments {
				workloads[d.Name] = workload{d.Spec.Selector.MatchLabels, &d.Spec.Template}
				if d.Spec.Replicas != nil && slices.ContainsFunc(r.hpas, func(h *autoscalingv2.HorizontalPodAutoscaler) bool { return h.Spec.ScaleTargetRef.Name == d.Name }) {
					t.Errorf("Deployment %s sets replicas under an autoscaler", d.Name)
				}
			}
			for _, s := range r.statefulSets {
				workloads[s.Name] = workload{s.Spec.Selector.MatchLabels, &s.Spec.Template}
			}
			for wname, w := range workloads {
				aff := w.pod.Spec.Affinity
				if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
					t.Errorf("%s: no preferred pod anti-affinity", wname)
				} else {
					term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
					if term.TopologyKey != "kubernetes.io/hostname" || !equalMaps(term.LabelSelector.MatchLabels, w.selector) {
						t.Errorf("%s: anti-affinity %+v", wname, term)
					}
				}
				if len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
					t.Errorf("%s: required anti-affinity", wname)
				}
				if !containsLabels(w.pod.Labels, w.selector) {
					t.Errorf("%s: pod labels %v miss the selector %v", wname, w.pod.Labels, w.selector)
				}
				pdbs := 0
				for _, p := range r.pdbs {
					if equalMaps(p.Spec.Selector.MatchLabels, w.selector) {
						pdbs++
					}
				}
				if pdbs != 1 {
					t.Errorf("%s: %d PodDisruptionBudgets", wname, pdbs)
				}
			}
			for _, c := range []string{"ingest", "bridge"} {
				found := false
				for _, h := range r.hpas {
					if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == fullName(c) {
						found = true
						if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
							t.Errorf("HPA %s: replicas %v..%d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
						}
					}
				}
				if !found {
					t.Errorf("no HorizontalPodAutoscaler for %s", c)
				}
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	return len(a) == len(b) && containsLabels(a, b)
}

func containsLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// NOTES.txt shows a signed webhook as the README does.
func TestNotes(t *testing.T) {
	r := render(t, nil)
	for _, want := range []string{
		"port-forward svc/" + fullName("ingest") + " 8080:8080",
		"webhook-id: $id", "webhook-timestamp: $ts", "webhook-signature: v1,$sig",
		`"$id.$ts.$body"`, "${secret#whsec_}", "openssl dgst -sha256 -mac HMAC",
		"/v1/webhooks/presence",
	} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q", want)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, shared := range []string{`printf '%s' "$id.$ts.$body"`, `-H "webhook-signature: v1,$sig"`} {
		if !strings.Contains(string(readme), shared) || !strings.Contains(r.notes, shared) {
			t.Errorf("NOTES.txt and README.md do not both sign with %s", shared)
		}
	}
}
