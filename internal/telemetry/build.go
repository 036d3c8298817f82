package telemetry

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Build is what the binary knows of its own build.
type Build struct {
	// Version is the module version ("(devel)" for a build from a checkout).
	Version string
	// Revision is the VCS revision the binary was built from, with
	// "-dirty" when the tree had changes; "" when unknown.
	Revision  string
	GoVersion string
}

// BuildInfo reads the binary's build information.
func BuildInfo() Build {
	b := Build{Version: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version, b.GoVersion = info.Main.Version, info.GoVersion
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

// registerBuildInfo exports the build as driftguard_build_info, whose value
// is always 1: its labels are the point.
func registerBuildInfo(reg prometheus.Registerer) {
	b := BuildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "driftguard_build_info",
		Help:        "The binary's version, VCS revision and Go version, as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}
