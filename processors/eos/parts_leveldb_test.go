package eos

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// The parts of a value read from LevelDB keep the bytes they were read
// with. LevelDB's iterator may hand a block's buffer back to its pool once
// it moves to the next block; a part kept without a copy then reads as
// another's bytes (a conversation's sends failed to decode with trailing
// bytes). Without a block cache and with small blocks, every part is read
// from a buffer the next block reuses.
func TestPartsReadFromLevelDBStayAsRead(t *testing.T) {
	db, err := leveldb.OpenFile(t.TempDir(), &opt.Options{DisableBlockCache: true, BlockSize: 128})
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.New(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want := map[string][]byte{}
	for i := range 200 {
		name := fmt.Sprintf("s%03d", i)
		want[name] = bytes.Repeat([]byte{byte(i)}, 100+i%7)
		if err := st.Set(partKey("conv", name), want[name]); err != nil {
			t.Fatal(err)
		}
	}
	// Into table files, where blocks are read through the pool.
	if err := db.CompactRange(util.Range{}); err != nil {
		t.Fatal(err)
	}
	parts, err := (&partition{store: st}).partsOf("conv")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(want) {
		t.Fatalf("%d parts read, want %d", len(parts), len(want))
	}
	for _, p := range parts {
		if !bytes.Equal(p.Data, want[p.Name]) {
			t.Fatalf("part %s reads %d bytes starting %x, want %d bytes of %x", p.Name, len(p.Data), p.Data[:min(4, len(p.Data))], len(want[p.Name]), want[p.Name][0])
		}
	}
}
