package checker

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Print writes the verdict in words.
func Print(w io.Writer, r *Report) {
	for _, name := range slices.Sorted(maps.Keys(r.Streams)) {
		s := r.Streams[name]
		fmt.Fprintf(w, "%-9s accepted %d, failed %d", name, s.Accepted, s.Failed)
		if s.InLog > 0 || s.Decisions > 0 {
			fmt.Fprintf(w, ", in log %d, decisions %d, rows %d", s.InLog, s.Decisions, s.Rows)
		}
		fmt.Fprintf(w, ", entities %d: lost %d, doubled %d, state mismatches %d\n", s.Entities, s.Lost, s.Doubled, s.Mismatched)
		if len(s.Outcomes) > 0 {
			var parts []string
			for _, o := range slices.Sorted(maps.Keys(s.Outcomes)) {
				parts = append(parts, fmt.Sprintf("%s=%d", o, s.Outcomes[o]))
			}
			fmt.Fprintf(w, "          outcomes %s\n", strings.Join(parts, " "))
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "          %s\n", n)
		}
	}
	verdict := "PASSED"
	if !r.Verdict.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "verdict: %s (lost %d, doubled %d, state mismatches %d, never accepted %d)\n",
		verdict, r.Verdict.Lost, r.Verdict.Doubled, r.Verdict.Mismatched, r.Verdict.Failed)
}
