package charts

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/driftguard/driftguard/internal/config"
)

// A ClickHouse cluster over TLS, as docs/deploy.md sets one up, reaches
// the sink and the migrate hook alike: every replica's address, TLS with
// the system roots, the user and the cluster.
func TestClickHouseOverTLSOnACluster(t *testing.T) {
	r := render(t, valuesYAML(t, `
clickhouse: {addr: "ch-1:9440,ch-2:9440", database: driftguard, username: driftguard, cluster: analytics, tls: {enabled: true}}
`))
	for cmName, c := range map[string]corev1.Container{
		fullName("config"):      r.deployment(t, "sink").Spec.Template.Spec.Containers[0],
		fullName("hook-config"): r.jobs[0].Spec.Template.Spec.Containers[0],
	} {
		cfg, err := config.Load(writeConfig(t, r.configMap(t, cmName)), environ(c))
		if err != nil {
			t.Fatalf("%s: %v", cmName, err)
		}
		ch := cfg.ClickHouse
		if len(ch.Addrs()) != 2 || !ch.TLS.On() || ch.Username != "driftguard" || ch.Cluster != "analytics" {
			t.Errorf("%s: addresses %v, TLS %v, user %q, cluster %q", cmName, ch.Addrs(), ch.TLS.On(), ch.Username, ch.Cluster)
		}
	}
	for _, bad := range []string{
		"clickhouse: {cluster: 'my-cluster'}",
		// One place for each setting: the values, not the config file.
		"config: {clickhouse: {cluster: analytics}}",
		"config: {clickhouse: {tls: {enabled: true}}}",
	} {
		if _, _, err := renderValues(loadChart(t), valuesYAML(t, bad)); err == nil {
			t.Errorf("values %s rendered, want the schema to refuse them", bad)
		}
	}
}
