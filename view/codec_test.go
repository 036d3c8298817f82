package view_test

import (
	"reflect"
	"testing"

	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/view"
)

// Both codecs give back what they encoded, and refuse a value of another
// type instead of writing something no reader decodes.
func TestCodecsRoundTrip(t *testing.T) {
	e := &view.Entity{Row: decide.Row{Version: 7, UpdatedAtMs: 1_700_000_000_000}, State: []byte(`{"presence":"AWAY"}`), NextRevision: 8}
	st := &view.State{Stream: "presence", Key: "alice", Version: 7, State: []byte(`{"presence":"AWAY"}`), UpdatedAtMs: 1_700_000_000_000}
	for _, c := range []struct {
		codec interface {
			Encode(any) ([]byte, error)
			Decode([]byte) (any, error)
		}
		value any
	}{{view.TableCodec{}, e}, {view.StateCodec{}, st}} {
		data, err := c.codec.Encode(c.value)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.codec.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.value) {
			t.Errorf("%T: decoded %+v, encoded %+v", c.codec, got, c.value)
		}
		if _, err := c.codec.Encode("alice"); err == nil {
			t.Errorf("%T encoded a string", c.codec)
		}
	}
}
