package processors

import "github.com/driftguard/driftguard/processors/decide"

// tableValue is the per-key value of the group table `<stream>-table`: the
// rules' entity. Tables of earlier releases stored beside it a memory of
// what the key's recent inputs decided, for goka's own processor's
// redeliveries; it is read and passed over (entityCodec).
type tableValue struct {
	decide.Entity
	// stored: the value was read from the table or written to it, so its
	// parts are stored as sends says (entityCodec's EncodeParts writes
	// only what changed since); a new value has nothing stored.
	stored bool
	// sends is the range of the conversation's sends its stored parts
	// hold (format 6), or that its value names when decoded alone.
	sends sendRange
}
