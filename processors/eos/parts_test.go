package eos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lovoo/goka/storage"
)

// wordsCodec keeps a []string value as its count, with each word a part
// of its own named by its index; it writes every word on each change and
// asks for the replacement of the stored parts when the value is new.
type wordsCodec struct{}

type words struct {
	list   []string
	stored bool
}

func (wordsCodec) Encode(any) ([]byte, error) { return nil, fmt.Errorf("parted only") }
func (wordsCodec) Decode([]byte) (any, error) { return nil, fmt.Errorf("parted only") }

func (wordsCodec) EncodeParts(value any) (Parts, error) {
	w := value.(*words)
	ps := Parts{Head: []byte(strconv.Itoa(len(w.list))), Replace: !w.stored, Size: 1}
	for i, s := range w.list {
		ps.Changed = append(ps.Changed, Part{Name: strconv.Itoa(i), Data: []byte(s)})
	}
	return ps, nil
}

func (wordsCodec) DecodeParts(head []byte, parts []Part) (any, error) {
	n, err := strconv.Atoi(string(head))
	if err != nil || n != len(parts) {
		return nil, fmt.Errorf("head %q with %d parts", head, len(parts))
	}
	w := &words{stored: true}
	for _, p := range parts {
		w.list = append(w.list, string(p.Data))
	}
	return w, nil
}

func (wordsCodec) Stored(value any) { value.(*words).stored = true }

// A partition stores a PartedCodec's value as its head and parts, lists
// only the keys (not the parts) to visitors, reads the value back whole,
// and deletes its parts with it: those a new value does not write again,
// and all of them when the key is deleted.
func TestPartitionKeepsPartsBesideTheirKey(t *testing.T) {
	part, err := openPartition(0, storage.NewMemory(), wordsCodec{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(key string, v any) {
		t.Helper()
		part.set(key, v)
		if err := part.encode(); err != nil {
			t.Fatal(err)
		}
		if err := part.apply(); err != nil {
			t.Fatal(err)
		}
		part.reset()
	}
	storedKeys := func() []string {
		it, err := part.store.Iterator()
		if err != nil {
			t.Fatal(err)
		}
		defer it.Release()
		var keys []string
		for it.Next() {
			keys = append(keys, strings.ReplaceAll(string(it.Key()), PartSeparator, "/"))
		}
		return keys
	}
	commit("a", &words{list: []string{"x", "y", "z"}})
	commit("b", &words{list: []string{"w"}})
	if got, want := storedKeys(), []string{"a", "a/0", "a/1", "a/2", "b", "b/0"}; !slices.Equal(got, want) {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if keys, err := part.keys(); err != nil || !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %q, %v", keys, err)
	}
	v, err := part.value("a")
	if err != nil || !slices.Equal(v.(*words).list, []string{"x", "y", "z"}) {
		t.Fatalf("a reads %+v, %v", v, err)
	}
	// A new value of a: its third part was the old value's only.
	commit("a", &words{list: []string{"p", "q"}})
	if got, want := storedKeys(), []string{"a", "a/0", "a/1", "b", "b/0"}; !slices.Equal(got, want) {
		t.Fatalf("after a new value, stored %q, want %q", got, want)
	}
	commit("a", nil)
	if got, want := storedKeys(), []string{"b", "b/0"}; !slices.Equal(got, want) {
		t.Fatalf("after a delete, stored %q, want %q", got, want)
	}
	if v, err := part.value("a"); err != nil || v != nil {
		t.Fatalf("a deleted reads %+v, %v", v, err)
	}
}
