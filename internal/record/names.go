package record

// Result is what a decision did with an event: the outcome field of an
// outcome record, the outcome column of driftguard.events (design §5).
type Result string

// The outcomes.
const (
	Applied     Result = "applied"
	Duplicate   Result = "duplicate"
	Stale       Result = "stale"
	Buffered    Result = "buffered"
	Quarantined Result = "quarantined"
	Reconciled  Result = "reconciled"
	Expired     Result = "expired"
	Rejected    Result = "rejected"
	// Actioned is an operator action carried out (record.Action); the
	// row's action and requested_by name it and who asked.
	Actioned Result = "actioned"
	// Skipped is a gap an operator's skip-gap gave up on: the row's
	// version is the first missing sequence and its gap how many were
	// skipped.
	Skipped Result = "skipped"
)

// Results are every outcome, in the order of design §5.
var Results = []Result{Applied, Duplicate, Stale, Buffered, Quarantined, Reconciled, Expired, Rejected, Actioned, Skipped}

// Reason says why a decision was made, on an outcome record, or why a
// record went to the DLQ.
type Reason string

// Reasons of outcome records.
const (
	// ReasonTerminal: the entity reached a terminal state; nothing changes
	// it again (rejected, and the buffered steps a terminal step leaves).
	ReasonTerminal Reason = "terminal"
	// ReasonBufferFull: the gapless buffer or a parent's quarantine is
	// full (rejected, and copied to the DLQ).
	ReasonBufferFull Reason = "buffer_full"
	// ReasonSameSequence: a buffered step again under a new event id
	// (duplicate).
	ReasonSameSequence Reason = "same_sequence"
	// ReasonGapTimeout: a gap stayed open past limits.gap_timeout
	// (expired; the replay is requested again).
	ReasonGapTimeout Reason = "gap_timeout"
	// ReasonOrphanTTL: a child whose parent never came within parent.ttl
	// (expired, and copied to the DLQ).
	ReasonOrphanTTL Reason = "orphan_ttl"
	// ReasonNotMember: a send or a receipt from someone who is not a
	// member of the conversation when it is decided (assign).
	ReasonNotMember Reason = "not_member"
	// ReasonAheadOfConversation: a receipt past the last message
	// (rejected).
	ReasonAheadOfConversation Reason = "ahead_of_conversation"
	// ReasonConversationFull: a member added, or a receipt of a new
	// reader, that would grow the conversation's members and cursors past
	// its share of the table value (rejected, and copied to the DLQ).
	ReasonConversationFull Reason = "conversation_full"
	// ReasonUnknownType: an event of a type the stream's policy has no
	// role for, written to `<stream>.in` by a producer other than ingest
	// (rejected).
	ReasonUnknownType Reason = "unknown_type"
	// ReasonActionNotSupported: an operator action that means nothing
	// under the stream's policy, such as skip-gap on a latest stream
	// (rejected).
	ReasonActionNotSupported Reason = "action_not_supported"
	// ReasonNothingToDo: an operator action for a key that holds nothing
	// it acts on: skip-gap without a gap, release without quarantined
	// children (rejected).
	ReasonNothingToDo Reason = "nothing_to_do"
	// ReasonConfirmationRequired: a reset without its confirmation
	// (rejected).
	ReasonConfirmationRequired Reason = "confirmation_required"
	// ReasonReleased: a quarantined child an operator's release expired
	// before its TTL (expired, and copied to the DLQ).
	ReasonReleased Reason = "released"
	// ReasonReset: an event buffered or quarantined for a key an
	// operator reset (rejected, and copied to the DLQ so that it can be
	// redriven).
	ReasonReset Reason = "reset"
)

// Reasons of dead letters that are not decisions.
const (
	// ReasonUndecodable: a `<stream>.in` record that does not parse as the
	// stream's event.
	ReasonUndecodable Reason = "undecodable"
	// ReasonKeyMismatch: a `<stream>.in` record whose Kafka key differs
	// from the key in its body.
	ReasonKeyMismatch Reason = "key_mismatch"
	// ReasonSinkUndecodable: a `<stream>.outcomes`, `<stream>.state` or
	// `<stream>.dlq` record the ClickHouse sink cannot decode, written to
	// the dlq table (never to a DLQ topic) so that it is kept and seen
	// rather than dropped, while its partition keeps flowing.
	ReasonSinkUndecodable Reason = "sink_undecodable"
	// ReasonReplayUndeliverable: a `<stream>.replay` request the relay
	// could not deliver to the publisher: refused (4xx) or unanswered
	// within replay.give_up_after.
	ReasonReplayUndeliverable Reason = "replay_undeliverable"
)

// Reasons are every reason a record may carry.
var Reasons = []Reason{ReasonTerminal, ReasonBufferFull, ReasonSameSequence, ReasonGapTimeout, ReasonOrphanTTL,
	ReasonNotMember, ReasonAheadOfConversation, ReasonConversationFull, ReasonUnknownType,
	ReasonActionNotSupported, ReasonNothingToDo, ReasonConfirmationRequired, ReasonReleased, ReasonReset, ReasonUndecodable, ReasonKeyMismatch, ReasonSinkUndecodable, ReasonReplayUndeliverable}

// IsOrphanExpiry reports whether a dead letter's reason is a quarantined
// child given up on: its TTL passed, or an operator released it. Both
// are permanently orphaned.
func IsOrphanExpiry(r Reason) bool { return r == ReasonOrphanTTL || r == ReasonReleased }
