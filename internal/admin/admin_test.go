package admin

import (
	"slices"
	"testing"
)

func TestParseTokens(t *testing.T) {
	long := "0123456789abcdef01234567"
	got, err := ParseTokens(" oncall:" + long + " , " + long + "x,,")
	if err != nil || !slices.Equal(got, []Token{{"oncall", long}, {"admin", long + "x"}}) {
		t.Fatalf("tokens %+v, %v", got, err)
	}
	if got, err := ParseTokens(""); err != nil || got != nil {
		t.Fatalf("no token: %+v, %v", got, err)
	}
	for _, bad := range []string{"oncall:short", ":" + long, long[:MinTokenBytes-1]} {
		if _, err := ParseTokens(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
