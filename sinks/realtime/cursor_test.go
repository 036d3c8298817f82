package realtime

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// Every cursor survives its encoding, and nothing else decodes as one
// without error unless it is one.
func TestCursorRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c Cursor
		copy(c.Epoch[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "epoch"))
		c.Offsets = rapid.SliceOfN(rapid.Int64Range(0, 1<<62), 0, 64).Draw(t, "offsets")
		got, err := ParseCursor(c.String())
		if err != nil {
			t.Fatal(err)
		}
		if c.Offsets == nil {
			c.Offsets = []int64{}
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%s decoded as %+v, want %+v", c, got, c)
		}
	})
}

func FuzzParseCursor(f *testing.F) {
	f.Add(Cursor{Offsets: []int64{0, 5, 1 << 40}}.String())
	f.Add("")
	f.Add("AQ")
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		again, err := ParseCursor(c.String())
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%q decoded as %+v, which encodes to %q: %v", s, c, c.String(), err)
		}
	})
}
