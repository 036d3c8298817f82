package clickhouse_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// Over TLS (18.16's tcp_port_secure, a certificate of the test's own CA),
// as a user with a password, the migrations run and the sink's rows land;
// an INSERT the sink abandons writes nothing, as on the plain port.
func TestSinkAndMigrateOverTLSWithAPassword(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, c := openDatabase(t, testenv.ClickHouseSecure(t))
	cfg := migrated(t, ctx, conn, c)
	const rows = 500
	if err := quietSink(cfg, conn).Insert(ctx, outcomeRecords(naming.Prefixes{}.For("presence").Outcomes, 0, rows)); err != nil {
		t.Fatal(err)
	}
	// Half an INSERT: a block on its way, then the connection dropped, as
	// a sink gives up a batch. Over TLS the connection must still end in
	// a reset, not the close_notify 18.16 would take as the INSERT's end.
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+c.Database+".events (stream, entity_key, event_id)")
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := batch.Append("presence", "abandoned", "abandoned"); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := batch.Abort(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // what the server would need to write it
	var n, abandoned uint64
	if err := conn.QueryRow(ctx, "SELECT count(), countIf(entity_key = 'abandoned') FROM "+c.Database+".events").Scan(&n, &abandoned); err != nil {
		t.Fatal(err)
	}
	if n != rows || abandoned != 0 {
		t.Errorf("events holds %d rows, %d of them from the abandoned INSERT; want the sink's %d alone", n, abandoned, rows)
	}
}

// What goes wrong connecting is told with the setting to fix.
func TestOpenNamesTheSettingItFailsOn(t *testing.T) {
	secure := testenv.ClickHouseSecure(t)
	wrongPassword := secure
	wrongPassword.Password = "not-" + secure.Password
	systemRoots := secure
	systemRoots.TLS = config.TLS{Enabled: true}
	otherCA := secure
	otherCA.TLS.CAFile = testenv.ForeignCA(t)
	otherName := secure
	otherName.TLS.ServerName = "elsewhere.example"
	plainPort := secure
	plainPort.Addr = testenv.ClickHouse(t)
	for _, tc := range []struct {
		name string
		c    config.ClickHouse
		want []string
	}{
		{"wrong password", wrongPassword, []string{`user "` + secure.Username + `" was refused`, "clickhouse.password"}},
		{"CA not trusted", systemRoots, []string{"clickhouse.tls.ca_file", "certificate"}},
		{"another CA", otherCA, []string{"clickhouse.tls.ca_file", otherCA.TLS.CAFile}},
		{"another name", otherName, []string{"clickhouse.tls.server_name"}},
		{"TLS to the plain port", plainPort, []string{"clickhouse.addr", "secure native port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := sinkch.Open(testenv.Context(t, 30*time.Second), tc.c)
			if err == nil {
				conn.Close()
				t.Fatal("Open succeeded")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// Of several addresses, the first that answers serves: a dead replica
// first in clickhouse.addr costs its refused dial, and one that swallows
// what it is sent (here, a TLS handshake) the time one address may take,
// not the connection.
func TestOpenSkipsADeadAddress(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	refused := cfg.ClickHouse
	refused.Addr = listen(t, false) + ", " + testenv.ClickHouse(t)
	silent := testenv.ClickHouseSecure(t)
	silent.Addr = listen(t, true) + "," + silent.Addr
	for name, c := range map[string]config.ClickHouse{"refused": refused, "silent": silent} {
		t.Run(name, func(t *testing.T) {
			conn, err := sinkch.Open(testenv.Context(t, 30*time.Second), c)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var one uint8
			if err := conn.QueryRow(context.Background(), "SELECT toUInt8(1)").Scan(&one); err != nil || one != 1 {
				t.Errorf("SELECT 1 through %s = %d, %v", c.Addr, one, err)
			}
		})
	}
}

// listen returns a loopback address that refuses connections, or with
// silent, one that accepts them and never answers.
func listen(t *testing.T, silent bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !silent {
		ln.Close()
		return ln.Addr().String()
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn // open, unanswered, until the listener closes
		for {
			conn, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, conn)
		}
	}()
	return ln.Addr().String()
}
