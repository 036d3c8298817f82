package processors

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/lovoo/goka/storage"
	"pgregory.net/rapid"
)

// Any sequence of writes, deletes, offsets, iterations and reopenings reads
// back like a plain map, and a reopened storage holds what was written
// before Close.
func TestTableStorageBehavesLikeAMap(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		topic := fmt.Sprintf("t%d", run)
		maxKeys := rapid.IntRange(1, 8).Draw(rt, "pending keys")
		build := func() (storage.Storage, error) {
			st, err := tableStorageBuilder(dir)(topic, 0)
			if err == nil {
				st.(*tableStorage).maxKeys = maxKeys
			}
			return st, err
		}
		st, err := build()
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { st.Close() }()
		model := map[string]string{}
		offset := int64(-1)
		keys := rapid.SampledFrom([]string{"a", "b", "c", "d", "__offsetx", "e"})
		for range rapid.IntRange(1, 200).Draw(rt, "operations") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				k, v := keys.Draw(rt, "key"), rapid.StringN(0, 64, -1).Draw(rt, "value")
				if err := st.Set(k, []byte(v)); err != nil {
					rt.Fatal(err)
				}
				model[k] = v
			case 4:
				k := keys.Draw(rt, "key")
				if err := st.Delete(k); err != nil {
					rt.Fatal(err)
				}
				delete(model, k)
			case 5, 6:
				offset = rapid.Int64Range(0, 1<<40).Draw(rt, "offset")
				if err := st.SetOffset(offset); err != nil {
					rt.Fatal(err)
				}
			case 7:
				it, err := st.Iterator()
				if err != nil {
					rt.Fatal(err)
				}
				seen := map[string]string{}
				for it.Next() {
					v, _ := it.Value()
					seen[string(it.Key())] = string(v)
				}
				it.Release()
				if !maps.Equal(seen, model) {
					rt.Fatalf("iterator saw %v, want %v", seen, model)
				}
			case 8:
				if err := st.Close(); err != nil {
					rt.Fatal(err)
				}
				if st, err = build(); err != nil {
					rt.Fatal(err)
				}
			case 9:
				k := keys.Draw(rt, "key")
				v, err := st.Get(k)
				has, herr := st.Has(k)
				want, ok := model[k]
				if err != nil || herr != nil || has != ok || string(v) != want || (v == nil) == ok {
					rt.Fatalf("get %s: %q (has %v, %v %v), want %q (%v)", k, v, has, err, herr, want, ok)
				}
			}
			if got, err := st.GetOffset(-1); err != nil || got != offset {
				rt.Fatalf("offset %d (%v), want %d", got, err, offset)
			}
		}
	})
}

// A partition keeps what it flushed across a clean close and across a
// crash alike: the runtime reads the changelog after the stored offset
// either way. What a crash loses is only what was never flushed, with the
// offset that would have covered it.
func TestTableStorageKeepsPartitionsAcrossACrash(t *testing.T) {
	dir := t.TempDir()
	build := tableStorageBuilder(dir)
	open := func() storage.Storage {
		st, err := build("table", 3)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	if err := st.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := st.SetOffset(41); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	if v, _ := st.Get("k"); string(v) != "v" {
		t.Fatalf("after a clean close: %q", v)
	}
	if off, _ := st.GetOffset(-1); off != 41 {
		t.Fatalf("after a clean close the offset is %d", off)
	}
	if err := st.Set("k", []byte("w")); err != nil {
		t.Fatal(err)
	}
	if err := st.SetOffset(42); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil { // flushes to LevelDB
		t.Fatal(err)
	}
	if err := st.Set("k", []byte("x")); err != nil { // pending only
		t.Fatal(err)
	}
	if err := st.SetOffset(43); err != nil {
		t.Fatal(err)
	}
	// A crash: LevelDB holds the flushed writes, the pending ones are
	// lost, and the storage was never closed.
	if err := st.(*tableStorage).db.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	if v, _ := st.Get("k"); string(v) != "w" {
		t.Fatalf("after a crash the partition holds %q, want the flushed value", v)
	}
	if off, _ := st.GetOffset(-1); off != 42 {
		t.Fatalf("after a crash the offset is %d, want the flushed 42", off)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Files LevelDB cannot read are repaired or, failing that, wiped: the
	// partition opens, and what it lost is read from the changelog.
	path := filepath.Join(dir, "table.3")
	manifests, err := filepath.Glob(filepath.Join(path, "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no LevelDB manifest in %s (%v)", path, err)
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("not a manifest"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st = open()
	defer st.Close()
	off, err := st.GetOffset(-1)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Get("k"); off != -1 && (off != 42 || string(v) != "w") {
		t.Fatalf("after repairing, the partition holds %q at offset %d: a value and an offset that do not belong together", v, off)
	}
}
