package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/driftguard/driftguard/internal/config"
)

// devAddrs checks where a dev run listens. dev signs with a secret the
// README prints, so by default it serves this machine alone: an address
// beyond loopback (DRIFTGUARD_HTTP_ADDR=0.0.0.0:8080) is refused unless
// public is set (--public), and with public no stream may use the demo
// secret, since anyone could then sign webhooks. It returns what the start
// log says of the scope.
func devAddrs(cfg *config.Config, public bool) (string, error) {
	var beyond []string
	for _, a := range []struct{ setting, env, addr string }{
		{"http.addr", "DRIFTGUARD_HTTP_ADDR", cfg.HTTP.Addr},
		{"bridge.addr", "DRIFTGUARD_BRIDGE_ADDR", cfg.Bridge.Addr},
	} {
		if !isLoopback(a.addr) {
			beyond = append(beyond, fmt.Sprintf("%s %s (%s)", a.setting, a.addr, a.env))
		}
	}
	if len(beyond) == 0 {
		return "loopback only", nil
	}
	if !public {
		return "", fmt.Errorf("dev serves this machine alone, with a public demo secret: %s is not a loopback address; use 127.0.0.1, or pass --public with secrets of your own (DRIFTGUARD_SECRETS_<STREAM>)", strings.Join(beyond, " and "))
	}
	var demo []string
	for _, name := range cfg.StreamNames() {
		if len(cfg.Streams[name].Signature.Secrets) == 0 {
			demo = append(demo, name)
		}
	}
	if len(demo) > 0 {
		return "", fmt.Errorf("dev --public serves %s, but streams %s have no secret and would take the public demo secret: set %s", strings.Join(beyond, " and "), strings.Join(demo, ", "), config.SecretsVariable(demo[0]))
	}
	return "beyond loopback (--public): " + strings.Join(beyond, " and "), nil
}

// isLoopback reports whether a listen address binds loopback alone: an
// empty host binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
