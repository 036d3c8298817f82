package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
)

func TestRunVersion(t *testing.T) {
	isolateEnv(t)
	r := runCLI(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "driftguard ") || !strings.Contains(r.stdout, "revision ") || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("%v", r)
	}
}

// get is one GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// `driftguard ingest` serves webhooks on http.addr and its /metrics,
// /healthz and /readyz on telemetry.addr only: the internet, which reaches
// the webhook port, sees neither metrics nor dependency errors.
func TestIngestServesItsOperationsApart(t *testing.T) {
	webhooks, ops := runIngestOnKfake(t)
	if status, body := get(t, "http://"+ops+"/metrics"); status != http.StatusOK ||
		!strings.Contains(body, "driftguard_ingest_in_flight_requests") || !strings.Contains(body, "driftguard_build_info{") {
		t.Errorf("telemetry /metrics: %d", status)
	}
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		if status, _ := get(t, "http://"+webhooks+path); status != http.StatusNotFound {
			t.Errorf("the webhook port answers %s with %d, want 404", path, status)
		}
	}
	if status, _ := get(t, "http://"+webhooks+"/v1/webhooks/presence"); status != http.StatusMethodNotAllowed {
		t.Errorf("the webhook port does not serve webhooks: GET %d", status)
	}
}

// runIngestOnKfake runs `driftguard ingest` on a kfake broker holding the
// shipped streams' topics, every stream signed with the demo secret, until
// the test ends; it returns the webhook and the operations addresses once
// ingest is ready; env are more NAME=value settings.
func runIngestOnKfake(t *testing.T, env ...string) (webhooks, ops string) {
	t.Helper()
	isolateEnv(t)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	webhooks, ops = freeLoopbackAddr(t), freeLoopbackAddr(t)
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(testenv.Fake(t), ","))
	t.Setenv("DRIFTGUARD_HTTP_ADDR", webhooks)
	t.Setenv("DRIFTGUARD_TELEMETRY_ADDR", ops)
	for _, s := range []string{"PRESENCE", "WORKFLOW", "CHAT", "ORDERS"} {
		t.Setenv("DRIFTGUARD_SECRETS_"+s, demoSecret)
	}
	// ingest produces to <stream>.in and creates no topic.
	if r := runCLI(t, "topics"); r.code != 0 {
		t.Fatalf("topics: %v", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"ingest"}, io.Discard, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("ingest exited %d", code)
		}
	})
	testenv.WaitFor(t, testenv.Context(t, time.Minute), "ingest ready", func() bool {
		status, _ := get(t, "http://"+ops+"/readyz")
		return status == http.StatusOK
	})
	return webhooks, ops
}

// pyroscopeStandIn is a local HTTP server in place of Pyroscope's ingest
// endpoint: it keeps what the profiler sends.
type pyroscopeStandIn struct {
	mu       sync.Mutex
	names    []string
	profiles []*profile.Profile
	// auth and tenant are the Authorization and X-Scope-OrgID headers of
	// each profile's request.
	auth, tenant []string
}

func (p *pyroscopeStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ingest" {
		http.NotFound(w, r)
		return
	}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		if part.FormName() != "profile" {
			continue
		}
		if prof, err := profile.Parse(part); err == nil {
			p.mu.Lock()
			p.names = append(p.names, r.URL.Query().Get("name"))
			p.profiles = append(p.profiles, prof)
			p.auth = append(p.auth, r.Header.Get("Authorization"))
			p.tenant = append(p.tenant, r.Header.Get("X-Scope-OrgID"))
			p.mu.Unlock()
		}
	}
	w.WriteHeader(http.StatusOK)
}

// labelled reports whether some CPU profile received under an application
// name containing tag has a sample with every one of labels.
func (p *pyroscopeStandIn) labelled(tag string, labels map[string]string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, prof := range p.profiles {
		if !strings.Contains(p.names[i], tag) || !isCPU(prof) {
			continue
		}
		for _, s := range prof.Sample {
			matched := true
			for k, v := range labels {
				if !contains(s.Label[k], v) {
					matched = false
				}
			}
			if matched {
				return true
			}
		}
	}
	return false
}

func isCPU(prof *profile.Profile) bool {
	for _, st := range prof.SampleType {
		if st.Type == "cpu" {
			return true
		}
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// With DRIFTGUARD_PYROSCOPE_ADDR set, a component sends its profiles there,
// tagged with the component, the pod, its namespace and the version, and
// a processor's work carries its stream; with the basic auth and tenant
// settings, every upload carries them: `dev --demo` on the embedded
// broker, profiled into a stand-in server.
func TestProfilesArriveTaggedByComponentAndStream(t *testing.T) {
	isolateEnv(t)
	stand := &pyroscopeStandIn{}
	srv := httptest.NewServer(stand)
	defer srv.Close()
	t.Setenv("DRIFTGUARD_PYROSCOPE_ADDR", srv.URL)
	t.Setenv("DRIFTGUARD_PYROSCOPE_BASIC_AUTH_USER", "profiler")
	t.Setenv("DRIFTGUARD_PYROSCOPE_BASIC_AUTH_PASSWORD", "s3cret-token")
	t.Setenv("DRIFTGUARD_PYROSCOPE_TENANT_ID", "team-a")
	t.Setenv("POD_NAME", "driftguard-processors-0")
	t.Setenv("POD_NAMESPACE", "streams")
	t.Setenv("DRIFTGUARD_HTTP_ADDR", freeLoopbackAddr(t))
	t.Setenv("DRIFTGUARD_BRIDGE_ADDR", freeLoopbackAddr(t))
	config := testenv.WriteConfig(t, "", "telemetry: {pyroscope_upload_every: 1s}\n")
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"dev", "--demo", "--no-sink", "--config", config}, &out, io.Discard) }()
	defer func() {
		cancel()
		<-done
	}()
	// More presence webhooks than the demo's, so the processor's work
	// shows in the CPU samples soon.
	banner := waitBanner(t, testenv.Context(t, time.Minute), &out)
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("load-%d", i)
			_ = postDemoWebhook(ctx, banner.webhooks, "presence", id,
				testenv.Presence{EventID: id, User: fmt.Sprintf("load-%d", i%50), Version: int64(i)}.Body())
		}
	}()
	testenv.WaitFor(t, testenv.Context(t, 2*time.Minute), "CPU profiles of dev's processors, by stream", func() bool {
		return stand.labelled("component=dev", map[string]string{"service": "processor presence", "stream": "presence"}) &&
			stand.labelled("component=dev", map[string]string{"service": "ingest"})
	})
	version := "version=" + telemetry.BuildInfo().Version
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("profiler:s3cret-token"))
	stand.mu.Lock()
	defer stand.mu.Unlock()
	for i, name := range stand.names {
		for _, tag := range []string{"pod=driftguard-processors-0", "namespace=streams", version} {
			if !strings.Contains(name, tag) {
				t.Errorf("profile %q has no tag %s", name, tag)
			}
		}
		if stand.auth[i] != wantAuth || stand.tenant[i] != "team-a" {
			t.Errorf("profile %q sent with Authorization %q and X-Scope-OrgID %q, want the configured user, password and tenant", name, stand.auth[i], stand.tenant[i])
		}
	}
}
