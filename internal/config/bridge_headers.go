package config

import (
	"fmt"
	"strings"
)

// validateFrameAncestors checks bridge.frame_ancestors: each a source of
// a CSP frame-ancestors directive, and 'none' alone. A value that could
// end the directive or the header (a ';', ',', space or control byte) is
// refused rather than written into the page's policy.
func validateFrameAncestors(sources []string) []error {
	var errs []error
	for i, src := range sources {
		path := fmt.Sprintf("bridge.frame_ancestors[%d]", i)
		switch {
		case src == "'none'" && len(sources) > 1:
			errs = append(errs, fmt.Errorf("in %s: 'none' must be the only source", path))
		case src == "'none'", src == "'self'", src == "*":
		case strings.HasPrefix(src, "'"):
			errs = append(errs, fmt.Errorf("in %s: %q is not a frame-ancestors keyword ('none' or 'self')", path, src))
		case src == "" || strings.ContainsFunc(src, func(r rune) bool { return r <= ' ' || r == ';' || r == ',' || r == 0x7f }):
			errs = append(errs, fmt.Errorf("in %s: %q is not a source (scheme://host[:port], a scheme such as https:, 'self' or 'none')", path, src))
		}
	}
	return errs
}
