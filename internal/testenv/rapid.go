package testenv

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// FewerChecks runs n checks in each rapid.Check of the test, unless the
// run asks for a number (-rapid.checks, RAPID_CHECKS): a check that
// decides and reads through Kafka is far slower than a rule's check.
func FewerChecks(t *testing.T, n int) {
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("rapid's flags are not registered: the test imports pgregory.net/rapid")
	}
	given := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(v *flag.Flag) { given = given || v.Name == f.Name })
	if given {
		return
	}
	was := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(was) })
}
