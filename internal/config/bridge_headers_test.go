package config

import (
	"strings"
	"testing"
)

// bridge.frame_ancestors takes CSP sources and keywords, 'none' alone, and
// nothing that could end the directive or the header.
func TestFrameAncestorsValidation(t *testing.T) {
	for _, ok := range [][]string{{"'none'"}, {"'self'"}, {"'self'", "https://portal.example.com", "https://*.example.com:8443"}, {"https:"}} {
		if errs := validateFrameAncestors(ok); errs != nil {
			t.Errorf("%q refused: %v", ok, errs)
		}
	}
	for _, bad := range [][]string{{"'none'", "'self'"}, {"'unsafe-inline'"}, {"https://a.example; script-src *"}, {"https://a.example,https://b.example"}, {"https://a.example\r\nX: y"}, {""}} {
		errs := validateFrameAncestors(bad)
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), "bridge.frame_ancestors[") {
			t.Errorf("%q: %v, want an error naming bridge.frame_ancestors", bad, errs)
		}
	}
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Bridge.FrameAncestors) != 1 || c.Bridge.FrameAncestors[0] != "'none'" {
		t.Errorf("default bridge.frame_ancestors %q, want ['none']", c.Bridge.FrameAncestors)
	}
	if c.HTTP.RefusalLogLines != 10 || c.HTTP.RefusalLogInterval.String() != "1m0s" {
		t.Errorf("default http.refusal_log_lines %d and refusal_log_interval %s, want 10 and 1m", c.HTTP.RefusalLogLines, c.HTTP.RefusalLogInterval)
	}
}
