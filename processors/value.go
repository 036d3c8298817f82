package processors

import "github.com/driftguard/driftguard/processors/decide"

// tableValue is the per-key value of the group table `<stream>-table`: the
// rules' entity. Tables of earlier releases stored beside it a memory of
// what the key's recent inputs decided, for goka's own processor's
// redeliveries; it is read and passed over (entityCodec).
type tableValue struct {
	decide.Entity
}
