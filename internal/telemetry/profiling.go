package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/grafana/pyroscope-go"
)

// Profiling is where continuous profiles go.
type Profiling struct {
	// Addr is the Pyroscope server, e.g. http://pyroscope:4040; empty
	// profiles nothing.
	Addr string
	// UploadEvery is how often profiles are sent; zero means 15s.
	UploadEvery time.Duration
	// BasicAuthUser and BasicAuthPassword authenticate to the server;
	// empty: none.
	BasicAuthUser, BasicAuthPassword string
	// TenantID goes in X-Scope-OrgID, for a multi-tenant server; empty:
	// none.
	TenantID string
}

// profileTags are the tags of every profile the process sends: the
// component, the pod (POD_NAME, which the chart sets from the downward
// API, else the host name, which is the pod's name in Kubernetes too),
// its namespace (POD_NAMESPACE; left out when unset) and the build's
// version, so that a profile is found by the pod an alert named and
// compared across releases.
func profileTags(component string, getenv func(string) string) map[string]string {
	tags := map[string]string{"component": component, "version": BuildInfo().Version}
	pod := getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	if pod != "" {
		tags["pod"] = pod
	}
	if ns := getenv("POD_NAMESPACE"); ns != "" {
		tags["namespace"] = ns
	}
	return tags
}

// StartProfiling sends the process's CPU, allocation, heap and goroutine
// profiles to the Pyroscope server, as application "driftguard" tagged with
// the component, the pod, its namespace and the version (profileTags),
// until stop is called. Without an address it does
// nothing. Work a goroutine does under Labeled carries its labels too (a
// processor's stream), so one profile splits by them.
func StartProfiling(p Profiling, component string, log *slog.Logger) (stop func(), err error) {
	if p.Addr == "" {
		return func() {}, nil
	}
	profiler, err := pyroscope.Start(pyroscope.Config{
		ApplicationName:   "driftguard",
		ServerAddress:     p.Addr,
		BasicAuthUser:     p.BasicAuthUser,
		BasicAuthPassword: p.BasicAuthPassword,
		TenantID:          p.TenantID,
		Tags:              profileTags(component, os.Getenv),
		UploadRate:        p.UploadEvery,
		Logger:            pyroscopeLogger{OrDiscard(log)},
		ProfileTypes: []pyroscope.ProfileType{
			pyroscope.ProfileCPU, pyroscope.ProfileAllocObjects, pyroscope.ProfileAllocSpace,
			pyroscope.ProfileInuseObjects, pyroscope.ProfileInuseSpace, pyroscope.ProfileGoroutines,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("profiling to %s: %w", p.Addr, err)
	}
	return func() { _ = profiler.Stop() }, nil
}

// Labeled runs fn with profile labels (key, value pairs) on its goroutine,
// which the goroutines it starts inherit: continuous profiles then tell,
// say, one stream's processor from another's. It is pyroscope's tag
// wrapper, without the profiler itself: runtime/pprof labels.
func Labeled(ctx context.Context, fn func(context.Context) error, keyValues ...string) error {
	var err error
	pprof.Do(ctx, pprof.Labels(keyValues...), func(ctx context.Context) { err = fn(ctx) })
	return err
}

// pyroscopeLogger sends the profiler's chatter to slog: its errors as
// warnings (a profile that could not be sent), the rest at debug level.
type pyroscopeLogger struct{ log *slog.Logger }

func (l pyroscopeLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pyroscope")
}
func (l pyroscopeLogger) Debugf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pyroscope")
}
func (l pyroscopeLogger) Errorf(format string, args ...any) {
	l.log.Warn(fmt.Sprintf(format, args...), "component", "pyroscope")
}
