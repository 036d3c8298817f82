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
clickhouse: {addr: "ch-1:9440,ch-2:9440", database: driftguard}
config: {clickhouse: {username: driftguard, cluster: analytics, tls: {enabled: true}}}
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
	if _, _, err := renderValues(loadChart(t), valuesYAML(t, "config: {clickhouse: {cluster: 'my-cluster'}}")); err == nil {
		t.Error("a cluster name that is not an identifier rendered, want the schema to refuse it")
	}
}
