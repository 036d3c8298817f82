package processors

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/eos"
)

// partedStore is a partition's storage as the runtime keeps a
// PartedCodec's values in it: heads under their keys, parts beside them.
type partedStore map[string][]byte

// write applies what EncodeParts returned for key, as the runtime does,
// and returns the bytes written.
func (s partedStore) write(key string, ps eos.Parts) int {
	written := map[string]bool{}
	for _, p := range ps.Changed {
		written[p.Name] = true
	}
	if ps.Replace {
		for name := range s.parts(key) {
			if !written[name] {
				delete(s, key+eos.PartSeparator+name)
			}
		}
	}
	s[key] = ps.Head
	n := len(ps.Head)
	for _, p := range ps.Changed {
		if p.Data == nil {
			delete(s, key+eos.PartSeparator+p.Name)
		} else {
			s[key+eos.PartSeparator+p.Name] = p.Data
		}
		n += len(p.Data)
	}
	return n
}

func (s partedStore) parts(key string) map[string][]byte {
	parts := map[string][]byte{}
	for k, v := range s {
		if name, ok := strings.CutPrefix(k, key+eos.PartSeparator); ok {
			parts[name] = v
		}
	}
	return parts
}

func (s partedStore) read(t testenv.Fataler, key string) *tableValue {
	v, err := decodeStoredValue(s[key], s.parts(key))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A conversation's sends kept in parts, against the value they come
// from: whatever sends join, are forgotten from the start, or replaced by
// a new value (a key deleted and decided anew), and whether the next
// transaction has the value from the cache or reads it from the storage,
// what the storage holds reads back as the value; the parts stored are
// exactly those of the sends held; and a transaction that adds one send
// writes the value and at most two parts, never the whole memory.
func TestConversationSendsInParts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store := partedStore{}
		const key = "conv"
		fresh := func() *tableValue {
			return &tableValue{Entity: decide.Entity{Chat: &decide.Conversation{Members: []string{"alice"}}}}
		}
		v := fresh()
		seq, at := int64(0), int64(1_000)
		for range rapid.IntRange(1, 40).Draw(t, "transactions") {
			c := v.Chat
			added := 0
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				n := rapid.IntRange(0, len(c.Sent)).Draw(t, "forgotten")
				c.Sent = c.Sent[n:]
			case 1:
				v, seq = fresh(), 0
				c = v.Chat
			case 2:
				c.Members = append(c.Members, rapid.StringMatching(`[a-z]{1,4}`).Draw(t, "member"))
			default:
				added = rapid.IntRange(1, 3).Draw(t, "sends")
				for range added {
					seq += rapid.Int64Range(1, 3).Draw(t, "sequence step")
					at += rapid.Int64Range(0, 500).Draw(t, "clock step")
					c.Sent = append(c.Sent, decide.SentMessage{Client: rapid.Uint64().Draw(t, "client"), Seq: seq, AtMs: at})
				}
				if n := len(c.Sent) - 150; n > 0 {
					c.Sent = c.Sent[n:] // a bound on the memory
				}
			}
			replaced := !v.stored
			ps, err := entityCodec{}.EncodeParts(v)
			if err != nil {
				t.Fatal(err)
			}
			written := store.write(key, ps)
			entityCodec{}.Stored(v)
			if added == 1 && !replaced && written > len(ps.Head)+2*(2+2*sendsPerPart*12) {
				t.Fatalf("one send wrote %d bytes beside a %d-byte value", written-len(ps.Head), len(ps.Head))
			}
			got := store.read(t, key)
			want, _ := json.Marshal(v)
			have, _ := json.Marshal(got)
			if string(want) != string(have) {
				t.Fatalf("read back %s\nwant      %s", have, want)
			}
			parts := map[string]bool{}
			for _, m := range v.Chat.Sent {
				parts[sendsPartName(sendsPartOf(m.Seq))] = true
			}
			if stored := store.parts(key); !maps.Equal(parts, maps.Collect(func(yield func(string, bool) bool) {
				for name := range stored {
					if !yield(name, true) {
						return
					}
				}
			})) {
				t.Fatalf("parts stored %d, the sends held are in %d", len(stored), len(parts))
			}
			if rapid.Bool().Draw(t, "evicted from the cache") {
				v = got
			}
		}
	})
}

// A part of a value read as a value is refused with an error that says
// what it is; the table's record keys tell parts from entities.
func TestTablePartIsNoEntity(t *testing.T) {
	v := &tableValue{Entity: decide.Entity{Chat: &decide.Conversation{Sent: []decide.SentMessage{{Client: 1, Seq: 1, AtMs: 5}}}}}
	ps, err := entityCodec{}.EncodeParts(v)
	if err != nil || len(ps.Changed) != 1 {
		t.Fatalf("parts %+v, %v", ps.Changed, err)
	}
	if _, err := DecodeTableValue(ps.Changed[0].Data); err == nil || !strings.Contains(err.Error(), "IsTablePart") {
		t.Fatalf("a part decoded as an entity: %v", err)
	}
	if !IsTablePart([]byte("conv"+eos.PartSeparator+ps.Changed[0].Name)) || IsTablePart([]byte("conv")) {
		t.Fatal("IsTablePart")
	}
	// The value alone names its sends but holds none; with its parts, all.
	alone, err := entityCodec{}.Decode(ps.Head)
	if err != nil || len(alone.(*tableValue).Chat.Sent) != 0 {
		t.Fatalf("the value alone: %+v, %v", alone, err)
	}
}
