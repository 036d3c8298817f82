package telemetry

import (
	"runtime/debug"
	"testing"
)

func TestBuildFrom(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/driftguard/driftguard", Version: "v0.0.0-20261202034200-da276b9abcde"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "da276b9abcde"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	bare := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	for _, tc := range []struct {
		name              string
		info              *debug.BuildInfo
		version, revision string
		want              Build
	}{
		{"go's VCS stamp", vcs, "", "", Build{Version: "v0.0.0-20261202034200-da276b9abcde", Revision: "da276b9abcde-dirty", GoVersion: "go1.26.8"}},
		{"no stamp at all", bare, "", "", Build{Version: "(devel)", GoVersion: "go1.26.8"}},
		{"no build information", nil, "", "", Build{Version: "unknown"}},
		// The image's build: no .git, version and revision from -ldflags.
		{"link-time stamp", bare, "v1.2.3", "0123abcd", Build{Version: "v1.2.3", Revision: "0123abcd", GoVersion: "go1.26.8"}},
		{"link-time stamp wins", vcs, "v1.2.3", "0123abcd", Build{Version: "v1.2.3", Revision: "0123abcd", GoVersion: "go1.26.8"}},
	} {
		if got := buildFrom(tc.info, tc.version, tc.revision); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
