package telemetry

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision are set at link time by a build that knows them
// without Go's own stamping, as the Containerfile does (its build context
// has no .git):
//
//	-ldflags "-X github.com/driftguard/driftguard/internal/telemetry.version=v1.2.3
//	          -X github.com/driftguard/driftguard/internal/telemetry.revision=<commit>"
//
// When set they take precedence over the module version and VCS stamp of
// the build information.
var version, revision string

// Build is what the binary knows of its own build.
type Build struct {
	// Version is the version stamped at link time, else the module version
	// ("(devel)" for a build from a checkout).
	Version string
	// Revision is the VCS revision the binary was built from, with
	// "-dirty" when the tree had changes; "" when unknown.
	Revision  string
	GoVersion string
}

// BuildInfo reads the binary's build information.
func BuildInfo() Build {
	info, _ := debug.ReadBuildInfo() // nil when the binary has none
	return buildFrom(info, version, revision)
}

// buildFrom is the build described by info (nil when the binary has none)
// and the version and revision stamped at link time ("" when not).
func buildFrom(info *debug.BuildInfo, stampedVersion, stampedRevision string) Build {
	b := Build{Version: "unknown"}
	if info != nil {
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
	}
	if stampedVersion != "" {
		b.Version = stampedVersion
	}
	if stampedRevision != "" {
		b.Revision = stampedRevision
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
