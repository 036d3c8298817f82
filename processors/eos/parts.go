package eos

import (
	"bytes"
	"fmt"

	"github.com/lovoo/goka"
)

// PartSeparator joins a key and a part's name into the storage and
// changelog key the part is kept under. No key of a graph with a
// PartedCodec table may contain it: such a key's value would be taken for
// another key's part (the graph refuses those keys before they reach the
// table).
const PartSeparator = "\x00"

// A PartedCodec is a table codec whose values are kept in parts: a head
// under the key, and parts under keys of their own (the key, PartSeparator
// and the part's name) in the same partition of the storage and the
// changelog. A transaction that changes a small piece of a large value
// then writes the head and the parts that changed, not the whole value:
// the changelog is compacted per key, so every record must hold all of
// what its key holds, and a value written whole with every change costs
// its full size each time.
//
// goka's own view of the table sees the head under the key and each part
// under its own key; the codec's Decode must read both kinds (a part may
// decode to a value that says what it is).
type PartedCodec interface {
	goka.Codec
	// EncodeParts encodes value relative to what is stored for it (as of
	// the DecodeParts that read it, or the Stored that followed its last
	// write).
	EncodeParts(value any) (Parts, error)
	// DecodeParts decodes a value from its head and the parts stored
	// under its key, in order of their names.
	DecodeParts(head []byte, parts []Part) (any, error)
	// Stored tells the codec that value, as EncodeParts last encoded it,
	// is committed: its next encoding is relative to it.
	Stored(value any)
}

// Parts is what a transaction writes for a value of a PartedCodec.
type Parts struct {
	// Head is written under the key.
	Head []byte
	// Changed are the parts to write, and those to delete (nil Data).
	Changed []Part
	// Replace: the value is new (nothing of it was read from the
	// storage), so every part stored under the key that Changed does not
	// name is deleted.
	Replace bool
	// Size is the bytes of the whole value as stored, head and every
	// part, for the value cache's bound.
	Size int
}

// Part is one part of a value, by name; nil Data deletes it.
type Part struct {
	Name string
	Data []byte
}

// partKey is where part name of key is stored.
func partKey(key, name string) string { return key + PartSeparator + name }

// partsOf reads the parts stored under key, in order of their names.
func (part *partition) partsOf(key string) ([]Part, error) {
	prefix := key + PartSeparator
	// The keys with the prefix sort before the key with the separator's
	// byte one higher.
	it, err := part.store.IteratorWithRange([]byte(prefix), []byte(key+"\x01"))
	if err != nil {
		return nil, err
	}
	defer it.Release()
	var parts []Part
	for it.Next() {
		data, err := it.Value()
		if err != nil {
			return nil, err
		}
		// A copy: LevelDB's iterator may reuse the bytes it returned once
		// it moves on (a block's buffer goes back to its pool), which made
		// an earlier part read as the later one's bytes.
		parts = append(parts, Part{Name: string(it.Key()[len(prefix):]), Data: bytes.Clone(data)})
	}
	return parts, it.Err()
}

// partedValue reads key's value of a PartedCodec from the storage.
func (part *partition) partedValue(key string, codec PartedCodec) (any, error) {
	head, err := part.store.Get(key)
	if err != nil || head == nil {
		return nil, err
	}
	parts, err := part.partsOf(key)
	if err != nil {
		return nil, err
	}
	return codec.DecodeParts(head, parts)
}

// encodeParted adds what key's value (nil: deleted) writes with a
// PartedCodec to the running transaction's encoded records.
func (part *partition) encodeParted(key string, value any, codec PartedCodec) error {
	var ps Parts
	if value != nil {
		var err error
		if ps, err = codec.EncodeParts(value); err != nil {
			return fmt.Errorf("encoding the table value of %q: %w", key, err)
		}
	}
	if value == nil || ps.Replace {
		// Every stored part goes, but for those written again below.
		stored, err := part.partsOf(key)
		if err != nil {
			return err
		}
		for _, p := range stored {
			part.encoded[partKey(key, p.Name)] = nil
		}
	}
	part.encoded[key] = ps.Head
	for _, p := range ps.Changed {
		part.encoded[partKey(key, p.Name)] = p.Data
	}
	if value != nil {
		part.sizes[key] = ps.Size
	}
	return nil
}
