package model

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
)

// Mismatch is one entity whose reported state differs from the model's.
type Mismatch struct {
	Stream string `json:"stream"`
	Key    string `json:"key"`
	Want   any    `json:"want"`
	Got    any    `json:"got"`
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s %s: want %+v, got %+v", m.Stream, m.Key, m.Want, m.Got)
}

// Compare returns every entity of stream whose state in got differs from
// want. An order neither created nor with children, and an empty
// conversation, count as absent: a contender may or may not report an
// entity nothing was applied to.
func Compare(stream string, want, got State) []Mismatch {
	switch stream {
	case "presence":
		return compareMaps(stream, want.Presence, got.Presence)
	case "orders":
		return compareMaps(stream, normalOrders(want.Orders), normalOrders(got.Orders))
	case "workflow":
		return compareMaps(stream, want.Workflow, got.Workflow)
	case "chat":
		return compareMaps(stream, normalChat(want.Chat), normalChat(got.Chat))
	}
	return []Mismatch{{Stream: stream, Key: "", Want: "a stream the model knows", Got: stream}}
}

// Streams are the streams the model knows, in a stable order.
var Streams = []string{"presence", "workflow", "chat", "orders"}

func compareMaps[V any](stream string, want, got map[string]V) []Mismatch {
	var out []Mismatch
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, Mismatch{Stream: stream, Key: k, Want: want[k], Got: nil})
		case !reflect.DeepEqual(want[k], g):
			out = append(out, Mismatch{Stream: stream, Key: k, Want: want[k], Got: g})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			out = append(out, Mismatch{Stream: stream, Key: k, Want: nil, Got: got[k]})
		}
	}
	return out
}

func normalOrders(in map[string]Order) map[string]Order {
	out := make(map[string]Order, len(in))
	for k, o := range in {
		if !o.Created && len(o.Children) == 0 {
			continue
		}
		if o.Children == nil {
			o.Children = []string{}
		}
		out[k] = o
	}
	return out
}

func normalChat(in map[string]Conversation) map[string]Conversation {
	out := make(map[string]Conversation, len(in))
	for k, c := range in {
		if c.LastSeq == 0 && len(c.Members) == 0 && len(c.Cursors) == 0 {
			continue
		}
		if c.Members == nil {
			c.Members = []string{}
		}
		if len(c.Cursors) == 0 {
			c.Cursors = nil
		}
		out[k] = c
	}
	return out
}
