package charts

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// chartSetKeys are the config keys the chart sets from values of its own
// (listeners, brokers, credentials, TLS, identities), which config.* must
// not set beside them, with the values that set them.
var chartSetKeys = map[string]string{
	"data_dir":                                "the processors' table volume (processors.storage)",
	"http.addr":                               "ingest's container port",
	"bridge.addr":                             "the bridge's container port",
	"bridge.secret":                           "bridge.secret",
	"bridge.tokens.hs256_keys":                "DRIFTGUARD_BRIDGE_HS256_KEYS in bridge.extraEnv",
	"telemetry.addr":                          "the metrics port",
	"telemetry.admin_token":                   "admin.tokenSecret",
	"telemetry.admin_token_file":              "admin.tokenSecret",
	"telemetry.pyroscope_addr":                "pyroscope.addr",
	"telemetry.pyroscope_tenant_id":           "pyroscope.tenantID",
	"telemetry.pyroscope_basic_auth_user":     "pyroscope.basicAuth",
	"telemetry.pyroscope_basic_auth_password": "pyroscope.basicAuth",
	"telemetry.pyroscope_upload_every":        "pyroscope (the default)",
	"kafka.brokers":                           "kafka.brokers",
	"kafka.topic_prefix":                      "kafka.topicPrefix",
	"kafka.group_prefix":                      "kafka.groupPrefix",
	"kafka.tls":                               "kafka.tls",
	"kafka.sasl":                              "kafka.sasl",
	"clickhouse.addr":                         "clickhouse.addr",
	"clickhouse.cluster":                      "clickhouse.cluster",
	"clickhouse.database":                     "clickhouse.database",
	"clickhouse.username":                     "clickhouse.username",
	"clickhouse.password":                     "clickhouse.passwordSecret",
	"clickhouse.password_file":                "clickhouse.passwordSecret",
	"clickhouse.tls":                          "clickhouse.tls",
	"processing.instance_id":                  "each processor pod's name",
}

// Every key of driftguard's config file can be set through the chart:
// under config.* as the schema allows it, or by a value of the chart's
// own. A key added to the config and to neither fails here, before a
// user finds the schema refusing it.
func TestSchemaCoversTheConfig(t *testing.T) {
	b, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var root schemaNode
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	allowed := root.Properties["config"]
	var missing []string
	var walk func(typ reflect.Type, prefix string, node *schemaNode)
	walk = func(typ reflect.Type, prefix string, node *schemaNode) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			// The streams have a schema of their own, checked against the
			// catalogue's by the render tests.
			if key == "" || key == "-" || prefix+key == "streams" {
				continue
			}
			path := prefix + key
			if _, ok := chartSetKeys[path]; ok {
				continue
			}
			var child *schemaNode
			if node != nil {
				child = node.Properties[key]
			}
			if child == nil {
				missing = append(missing, "config."+path)
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
				walk(ft, path+".", child)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "", allowed)
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("%s: neither in values.schema.json nor set by the chart (chartSetKeys)", m)
	}
}
