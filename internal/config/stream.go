package config

import (
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/schemas"
)

// Policy is a stream's ordering policy (design §2).
type Policy string

// The ordering policies.
const (
	// PolicyLatest applies a version only if it is greater than the last
	// applied one; without a version pointer each new event id applies in log
	// order.
	PolicyLatest Policy = "latest"
	// PolicyGapless applies exactly last+1 and buffers what is ahead.
	PolicyGapless Policy = "gapless"
	// PolicyAssign has the processor assign the sequence.
	PolicyAssign Policy = "assign"
)

// Signature schemes (design §3).
const (
	SchemeStandardWebhooks = "standard-webhooks"
	SchemeHMACSHA256Hex    = "hmac-sha256-hex"
	SchemeGitHub           = "github"
)

// Stream is one catalogue entry.
type Stream struct {
	// Name is the map key; it names the topics and the goka group.
	Name string `yaml:"-"`
	// Policy is latest, gapless or assign.
	Policy Policy `yaml:"policy"`
	// Key is the JSON pointer to the entity key.
	Key string `yaml:"key"`
	// KeyByType overrides Key for some event types: a child event is keyed
	// by its parent's id, so parent and children share a partition.
	KeyByType map[string]string `yaml:"key_by_type"`
	// EphemeralTypes are event types that ingest routes to
	// `<stream>.ephemeral` (e.g. typing indicators): never decided, stored in
	// a table, or written to ClickHouse.
	EphemeralTypes []string `yaml:"ephemeral_types"`
	// EventID is the JSON pointer to the unique event id; when the body has
	// none, the signature scheme's delivery id (webhook-id) is used.
	EventID string `yaml:"event_id"`
	// Type says where the event type comes from.
	Type TypeSource `yaml:"type"`
	// Version is the JSON pointer to the source's logical version, where the
	// policy uses one.
	Version string `yaml:"version"`
	// OccurredAt is the JSON pointer to the source's clock, in
	// OccurredAtUnit: "s" or "ms" for unix numbers, "rfc3339" for strings.
	// Default "s".
	OccurredAt     string `yaml:"occurred_at"`
	OccurredAtUnit string `yaml:"occurred_at_unit"`
	// ExpiresAt is the JSON pointer to when the claim goes stale (same unit
	// as occurred_at); without it, TTL after occurred_at (or after
	// received_at when the event has no occurred_at). Readers show unknown
	// after expires_at_ms. Zero TTL: claims never expire.
	ExpiresAt string        `yaml:"expires_at"`
	TTL       time.Duration `yaml:"ttl"`
	// Schemas maps each event type to its JSON Schema: a path in the
	// embedded schemas, or a file relative to the config file.
	Schemas map[string]string `yaml:"schemas"`
	// Signature selects the scheme and holds the secrets.
	Signature Signature `yaml:"signature"`
	// Terminal states are irrevocable: later changes are rejected.
	Terminal Terminal `yaml:"terminal"`
	// Parent joins children to a parent event: a child whose parent has not
	// arrived waits in lost+found under the parent's key.
	Parent Parent `yaml:"parent"`
	// Devices keeps device rows under each entity (latest policy).
	Devices Devices `yaml:"devices"`
	// Assign names the event types of an assign stream by the part each
	// plays (sends, membership changes, receipts) and where each reads its
	// fields.
	Assign Assign `yaml:"assign"`
	// Limits bound what one stream may hold.
	Limits Limits `yaml:"limits"`
	// Retention is how long each delete-policy topic keeps its records.
	Retention Retention `yaml:"retention"`
	// Replay sends the replay requests of a gapless stream to its
	// publisher (`driftguard relay`).
	Replay Replay `yaml:"replay"`

	baseDir string
}

// TypeSource reads the event type from a field or fixes it.
type TypeSource struct {
	// Field is a JSON pointer to the type.
	Field string `yaml:"field"`
	// Fixed is the type of every event of the stream.
	Fixed string `yaml:"fixed"`
}

// Signature configures webhook verification.
type Signature struct {
	// Scheme: standard-webhooks (default), hmac-sha256-hex or github.
	Scheme string `yaml:"scheme"`
	// Secrets: any one of them verifies, so secrets rotate without downtime.
	// Set them with DRIFTGUARD_SECRETS_<STREAM> rather than in the file.
	Secrets []string `yaml:"secrets" redact:"true"`
	// Tolerance is how far the signed time may be from now, in both
	// directions: webhook-timestamp's (standard-webhooks), or the body
	// field Timestamp names. Default 300s.
	Tolerance time.Duration `yaml:"tolerance"`
	// Timestamp is the JSON pointer to the time a body-HMAC scheme
	// (hmac-sha256-hex, github) checks against Tolerance, read in
	// occurred_at_unit: those schemes sign the body alone, so a time in
	// it is the only one a replay cannot change. Empty: no replay window
	// (the default), replays are left to the processors' dedup.
	Timestamp string `yaml:"timestamp"`
}

// Limits bound per-stream resources.
type Limits struct {
	// Partitions of every topic of the stream. Default 6.
	Partitions int `yaml:"partitions"`
	// MaxBodyBytes of one webhook. Default 256 KiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// DedupIDs and DedupWindow bound the dedup memory of each key and each
	// device row: an event id is remembered for DedupWindow after its
	// received_at, and the memory holds at most DedupIDs ids, so an id may
	// be pushed out early (counted) by that many newer ones. The count
	// bounds the table value: at DedupIDBytes an id, every row of a key
	// together stays within DedupBudgetBytes. Defaults 256 and 168h (7
	// days).
	DedupIDs    int           `yaml:"dedup_ids"`
	DedupWindow time.Duration `yaml:"dedup_window"`
	// Buffer and BufferBytes bound what one key holds ahead of a gap
	// (gapless): overflow goes to the DLQ, never to memory. The byte bound
	// keeps a table value well under Kafka's 1 MiB message limit. Defaults
	// 256 events and 512 KiB.
	Buffer      int `yaml:"buffer"`
	BufferBytes int `yaml:"buffer_bytes"`
	// GapTimeout is how long a gap may stay open before it is reported
	// (outcome expired, reason gap_timeout, replay requested again); it is
	// reported again every GapTimeout while open, and never skipped.
	// Default 5m.
	GapTimeout time.Duration `yaml:"gap_timeout"`
	// IdempotencyWindow and IdempotencyKeys bound how long and how many
	// (sender_device_id, client_message_id) pairs a conversation remembers
	// (assign): a retry within them gets the original sequence. Defaults 7
	// days and 2000 (about 160 KiB of table value).
	IdempotencyWindow time.Duration `yaml:"idempotency_window"`
	IdempotencyKeys   int           `yaml:"idempotency_keys"`
	// Devices bounds the device rows of one entity (devices): a new device
	// beyond it evicts the row that expired first, else the one updated
	// longest ago. Default 16.
	Devices int `yaml:"devices"`
}

// Devices keeps a row per device under each entity of a latest stream (a
// member with a phone and a laptop): each device is versioned, deduplicated
// and expires on its own, and the entity's public state shows a value
// derived from its live devices plus every device's row. Events without a
// device id are about the entity itself, decided as on a stream without
// devices.
type Devices struct {
	// Field is the JSON pointer to the device id; unset means no devices.
	Field string `yaml:"field"`
	// Derive is the top-level body field whose value the entity shows
	// (presence): the highest-ranked value among the live rows.
	Derive string `yaml:"derive"`
	// Rank orders Derive's values, most available first; unlisted values
	// rank last.
	Rank []string `yaml:"rank"`
}

// Enabled reports whether the stream keeps device rows.
func (d Devices) Enabled() bool { return d.Field != "" }

// Parent is a parent join. Children are keyed by their parent's id
// (key_by_type), so a parent and its children share a partition and a
// table entry.
type Parent struct {
	// Types are the parent event types.
	Types []string `yaml:"types"`
	// Children are the child event types; each needs a key_by_type pointer
	// to its parent's id.
	Children []string `yaml:"children"`
	// TTL is how long a child waits for its parent before it expires to the
	// DLQ and the orphans archive. Default 24h.
	TTL time.Duration `yaml:"ttl"`
	// Buffer bounds the children waiting under one parent. Default 1000.
	Buffer int `yaml:"buffer"`
}

// Joined reports whether the stream has a parent join.
func (s *Stream) Joined() bool { return len(s.Parent.Types) > 0 }

// IsChild reports whether events of the type wait for a parent.
func (s *Stream) IsChild(eventType string) bool { return slices.Contains(s.Parent.Children, eventType) }

// IsParent reports whether events of the type are parents.
func (s *Stream) IsParent(eventType string) bool { return slices.Contains(s.Parent.Types, eventType) }

// Assign configures the assign policy: the processor numbers an entity's
// (a conversation's) sends 1, 2, 3... with no gap, only members send, and
// each member's read and delivery cursors only move forward. The policy
// knows event types only by the parts named here, so a stream of other
// names (comments on support tickets, with agents as members) needs a
// schema per type and an entry, no code.
type Assign struct {
	// Send: the types that send a message, and where each reads its sender,
	// the sender's device and the client's id for the message. A send is
	// idempotent on (device, client message id).
	Send AssignSend `yaml:"send"`
	// Members: the types that add or remove a member, and where each reads
	// the member.
	Members AssignMembers `yaml:"members"`
	// Receipts: the types that move a member's read or delivery cursor,
	// and where each reads the member and the sequence it has reached.
	Receipts AssignReceipts `yaml:"receipts"`
	// MessageID is the id given to an assigned message, with {key} for the
	// entity key and {seq} for the sequence. Default "{key}:{seq}".
	MessageID string `yaml:"message_id"`
	// History is who reads which messages: HistoryJoined (the default), a
	// user reads the messages sent while they were a member; HistoryShared,
	// a member also reads everything sent before they joined.
	History string `yaml:"history"`
	// Typing names the conversation's typing signal, an ephemeral type:
	// the bridge produces it for a member's `POST …/typing` and shows it
	// to the members following the conversation. Optional.
	Typing AssignTyping `yaml:"typing"`
}

// AssignTyping names the typing signal of an assign stream.
type AssignTyping struct {
	// Type is the event type, one of the stream's ephemeral_types.
	Type string `yaml:"type"`
	// User points at the user who types.
	User string `yaml:"user"`
}

// The history policies of an assign stream (Assign.History).
const (
	HistoryJoined = "joined"
	HistoryShared = "shared"
)

// AssignSend names the sends of an assign stream.
type AssignSend struct {
	Types           []string `yaml:"types"`
	Sender          string   `yaml:"sender"`
	Device          string   `yaml:"device"`
	ClientMessageID string   `yaml:"client_message_id"`
	// Body points at the message's text, which the bridge's chat
	// catch-up serves; optional.
	Body string `yaml:"body"`
}

// AssignMembers names the membership changes of an assign stream.
type AssignMembers struct {
	Added   []string `yaml:"added"`
	Removed []string `yaml:"removed"`
	User    string   `yaml:"user"`
}

// AssignReceipts names the receipts of an assign stream.
type AssignReceipts struct {
	Read      []string `yaml:"read"`
	Delivered []string `yaml:"delivered"`
	User      string   `yaml:"user"`
	// Device points at the receiving device: delivery is recorded per
	// device. Optional; without it a delivery receipt counts for the user.
	Device   string `yaml:"device"`
	Sequence string `yaml:"sequence"`
}

// AssignRole is the part an event type plays in an assign stream.
type AssignRole uint8

// The parts of an assign stream's event types.
const (
	// RoleNone: a type the policy has no part for.
	RoleNone AssignRole = iota
	RoleSend
	RoleMemberAdded
	RoleMemberRemoved
	RoleReceiptRead
	RoleReceiptDelivered
)

// Roles maps each event type the section names to its part.
func (a *Assign) Roles() map[string]AssignRole {
	roles := map[string]AssignRole{}
	for role, types := range map[AssignRole][]string{
		RoleSend: a.Send.Types, RoleMemberAdded: a.Members.Added, RoleMemberRemoved: a.Members.Removed,
		RoleReceiptRead: a.Receipts.Read, RoleReceiptDelivered: a.Receipts.Delivered,
	} {
		for _, typ := range types {
			roles[typ] = role
		}
	}
	return roles
}

// configured reports whether any of the assign section is set.
func (a *Assign) configured() bool {
	return len(a.Send.Types)+len(a.Members.Added)+len(a.Members.Removed)+len(a.Receipts.Read)+len(a.Receipts.Delivered) > 0 ||
		a.Send.Sender != "" || a.Send.Device != "" || a.Send.ClientMessageID != "" || a.Members.User != "" ||
		a.Receipts.User != "" || a.Receipts.Device != "" || a.Receipts.Sequence != "" || a.MessageID != "" || a.History != "" ||
		a.Typing.Type != "" || a.Typing.User != ""
}

// Terminal names the states after which an entity never changes again:
// once an event whose field holds one of the values is applied, every
// later event of the entity is rejected with reason terminal (a
// redelivery of one already decided stays a duplicate).
type Terminal struct {
	// Field is the JSON pointer to the status.
	Field string `yaml:"field"`
	// Values are the terminal statuses.
	Values []string `yaml:"values"`
}

// Enabled reports whether the stream has terminal states.
func (t Terminal) Enabled() bool { return len(t.Values) > 0 }

func (s *Stream) applyDefaults() {
	orDefault(&s.Signature.Scheme, SchemeStandardWebhooks)
	orDefault(&s.Signature.Tolerance, 300*time.Second)
	orDefault(&s.OccurredAtUnit, "s")
	orDefault(&s.Limits.Partitions, 6)
	orDefault(&s.Limits.MaxBodyBytes, 256<<10)
	orDefault(&s.Limits.DedupIDs, 256)
	orDefault(&s.Limits.DedupWindow, 7*24*time.Hour)
	orDefault(&s.Limits.Buffer, 256)
	orDefault(&s.Limits.BufferBytes, 512<<10)
	orDefault(&s.Limits.GapTimeout, 5*time.Minute)
	orDefault(&s.Limits.IdempotencyWindow, 7*24*time.Hour)
	orDefault(&s.Limits.IdempotencyKeys, 2000)
	orDefault(&s.Limits.Devices, 16)
	s.Retention.applyDefaults()
	s.Replay.applyDefaults()
	if s.Policy == PolicyAssign {
		orDefault(&s.Assign.MessageID, "{key}:{seq}")
		orDefault(&s.Assign.History, HistoryJoined)
	}
	if s.Joined() {
		orDefault(&s.Parent.TTL, 24*time.Hour)
		orDefault(&s.Parent.Buffer, 1000)
	}
}

// The dedup memory's share of a table value. A remembered id is its
// 64-bit hash and the varint delta of its received_at from the id before
// it, at most 5 bytes while the ids span no more than MaxDedupWindow. The
// budget keeps a key's memory, every device row's included, at an eighth
// of Kafka's 1 MiB message limit, beside the buffers' limits.buffer_bytes.
const (
	DedupIDBytes     = 8 + 5
	DedupBudgetBytes = 128 << 10
	// TableValueBudget is the most a table value may take: Kafka's default
	// 1 MiB message limit less room for the record's key, headers and
	// batch framing. A key's applied body (at most limits.max_body_bytes),
	// what it holds (limits.buffer_bytes) and its dedup memory must fit.
	TableValueBudget = 1<<20 - 64<<10
	// MaxDedupWindow is longer than publishers retry (days) and than
	// <stream>.in keeps its records (7 days).
	MaxDedupWindow = 30 * 24 * time.Hour
)

// DedupRows is how many rows of a key keep a dedup memory: the entity's
// own, and one per device row on a stream with devices.
func (s *Stream) DedupRows() int {
	if s.Devices.Enabled() {
		return 1 + max(0, s.Limits.Devices)
	}
	return 1
}

var streamName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// heldBytes is the share of a table value the stream's held events may
// take: limits.buffer_bytes where the policy holds events (gapless
// buffers, lost+found), else none.
func (s *Stream) heldBytes() int {
	if s.Policy == PolicyGapless || s.Joined() {
		return s.Limits.BufferBytes
	}
	return 0
}

// MinSecretBytes is the shortest secret key accepted: an HMAC-SHA256 key
// shorter than its output weakens it, and empty secrets must never verify.
const MinSecretBytes = 24

func (s *Stream) validate(path string) []error {
	var errs []error
	add := func(sub, format string, args ...any) {
		p := path
		if sub != "" {
			p += "." + sub
		}
		errs = append(errs, fmt.Errorf("in %s: %s", p, fmt.Sprintf(format, args...)))
	}
	if !streamName.MatchString(s.Name) {
		add("", "stream name %q must match %s (it names Kafka topics and tables)", s.Name, streamName)
	}
	switch s.Policy {
	case PolicyLatest, PolicyGapless, PolicyAssign:
	case "":
		add("policy", "missing; one of latest, gapless, assign")
	default:
		add("policy", "unknown policy %q; one of latest, gapless, assign", s.Policy)
	}
	checkPointer := func(sub, p string, required bool) {
		if p == "" {
			if required {
				add(sub, "missing JSON pointer")
			}
			return
		}
		if !strings.HasPrefix(p, "/") {
			add(sub, "%q is not a JSON pointer: it must start with /", p)
		}
	}
	// needSchema reports an event type the catalogue names without a schema.
	needSchema := func(sub, typ string) {
		if _, ok := s.Schemas[typ]; !ok {
			add(sub, "event type %q has no schema", typ)
		}
	}
	checkPointer("key", s.Key, true)
	for typ, p := range s.KeyByType {
		checkPointer("key_by_type."+typ, p, true)
		needSchema("key_by_type."+typ, typ)
	}
	for i, typ := range s.EphemeralTypes {
		needSchema(fmt.Sprintf("ephemeral_types[%d]", i), typ)
	}
	checkPointer("event_id", s.EventID, false)
	checkPointer("version", s.Version, false)
	checkPointer("occurred_at", s.OccurredAt, false)
	checkPointer("expires_at", s.ExpiresAt, false)
	if s.TTL < 0 {
		add("ttl", "must not be negative")
	}
	checkPointer("type.field", s.Type.Field, false)
	if (s.Type.Field == "") == (s.Type.Fixed == "") {
		add("type", "set exactly one of field and fixed")
	}
	switch s.OccurredAtUnit {
	case "s", "ms", "rfc3339":
	default:
		add("occurred_at_unit", "must be s, ms or rfc3339, got %q", s.OccurredAtUnit)
	}
	if len(s.Schemas) == 0 {
		add("schemas", "no schema: every event type needs one")
	}
	for typ, file := range s.Schemas {
		if _, err := s.SchemaBytes(typ); err != nil {
			add("schemas."+typ, "%s: %v", file, err)
		}
	}
	switch s.Signature.Scheme {
	case SchemeStandardWebhooks, SchemeHMACSHA256Hex, SchemeGitHub:
		for i, secret := range s.Signature.Secrets {
			if _, err := SecretKey(s.Signature.Scheme, secret); err != nil {
				add(fmt.Sprintf("signature.secrets[%d]", i), "%v", err)
			}
		}
	default:
		add("signature.scheme", "unknown scheme %q; one of standard-webhooks, hmac-sha256-hex, github", s.Signature.Scheme)
	}
	if s.Signature.Tolerance < 0 {
		add("signature.tolerance", "must be positive")
	}
	checkPointer("signature.timestamp", s.Signature.Timestamp, false)
	if s.Signature.Timestamp != "" {
		switch {
		case s.Signature.Scheme == SchemeStandardWebhooks:
			add("signature.timestamp", "standard-webhooks signs webhook-timestamp, which the edge checks; a body field is for hmac-sha256-hex and github")
		case 2*s.Signature.Tolerance > s.Limits.DedupWindow:
			// A body dated up to tolerance ahead is accepted now and can be
			// replayed until tolerance after its date: the processors must
			// remember its id that long for a replay inside the window to
			// stay a duplicate.
			add("signature.tolerance", "%s, twice over (a body dated ahead of now may be replayed until the window ends behind it), is longer than limits.dedup_window (%s): a replay inside the window would be applied again once its id is forgotten",
				s.Signature.Tolerance, s.Limits.DedupWindow)
		}
	}
	if s.Limits.Partitions < 1 || s.Limits.Partitions > 10000 {
		add("limits.partitions", "must be between 1 and 10000, got %d", s.Limits.Partitions)
	}
	if s.Limits.MaxBodyBytes < 1 {
		add("limits.max_body_bytes", "must be positive")
	} else if most := MaxBodyFor(s); s.Limits.MaxBodyBytes > most {
		add("limits.max_body_bytes", "%d is over %d, the most a record of the stream's input topic (<stream>.in) can carry within Kafka's default max.message.bytes (%d) beside its headers and %d bytes for its key, event id and type",
			s.Limits.MaxBodyBytes, most, record.DefaultMaxMessageBytes, record.IdentityAllowanceBytes)
	}
	if s.Limits.Buffer < 1 || s.Limits.Buffer > 100000 {
		add("limits.buffer", "must be between 1 and 100000, got %d", s.Limits.Buffer)
	}
	if s.Limits.BufferBytes < 1 || s.Limits.BufferBytes > 768<<10 {
		add("limits.buffer_bytes", "must be between 1 and 786432 (a table value must stay under Kafka's 1 MiB message limit), got %d", s.Limits.BufferBytes)
	}
	if held := s.heldBytes(); s.Limits.MaxBodyBytes > 0 && s.Limits.MaxBodyBytes+int64(held)+DedupBudgetBytes > TableValueBudget {
		add("limits.max_body_bytes", "with limits.buffer_bytes (%d, what a key holds ahead of a gap or for its parent) and the dedup memory (%d), a table value could reach %d bytes, over its budget of %d under Kafka's 1 MiB message limit: lower one of them",
			held, DedupBudgetBytes, s.Limits.MaxBodyBytes+int64(held)+DedupBudgetBytes, TableValueBudget)
	}
	if s.Limits.IdempotencyKeys < 1 || s.Limits.IdempotencyKeys > 5000 {
		add("limits.idempotency_keys", "must be between 1 and 5000 (a table value must stay under Kafka's 1 MiB message limit), got %d", s.Limits.IdempotencyKeys)
	}
	if s.Limits.GapTimeout < time.Second {
		add("limits.gap_timeout", "must be at least 1s, got %s", s.Limits.GapTimeout)
	}
	if s.Joined() {
		if s.Policy != PolicyLatest {
			add("parent", "a parent join works with the latest policy, not %s", s.Policy)
		}
		for i, typ := range s.Parent.Children {
			if _, ok := s.KeyByType[typ]; !ok {
				add(fmt.Sprintf("parent.children[%d]", i), "child type %q needs a key_by_type pointer to its parent's id", typ)
			}
		}
		for i, typ := range append(append([]string(nil), s.Parent.Types...), s.Parent.Children...) {
			needSchema(fmt.Sprintf("parent[%d]", i), typ)
		}
		if s.Parent.TTL < time.Second {
			add("parent.ttl", "must be at least 1s, got %s", s.Parent.TTL)
		}
		if s.Parent.Buffer < 1 || s.Parent.Buffer > 100000 {
			add("parent.buffer", "must be between 1 and 100000, got %d", s.Parent.Buffer)
		}
	}
	checkPointer("terminal.field", s.Terminal.Field, len(s.Terminal.Values) > 0)
	checkPointer("devices.field", s.Devices.Field, false)
	if s.Devices.Enabled() {
		if s.Policy == PolicyGapless || s.Policy == PolicyAssign || s.Joined() {
			add("devices", "device rows work with the latest policy without a parent join")
		}
		if s.Devices.Derive == "" || strings.Contains(s.Devices.Derive, "/") {
			add("devices.derive", "needs the top-level body field the entity's value derives from, got %q", s.Devices.Derive)
		}
		if s.Limits.Devices < 1 || s.Limits.Devices > 1000 {
			add("limits.devices", "must be between 1 and 1000, got %d", s.Limits.Devices)
		}
	}
	if s.Terminal.Enabled() && s.Devices.Enabled() {
		add("terminal", "terminal states end the entity, whose value a stream with device rows derives from every device: drop devices or terminal")
	}
	switch {
	case s.Policy == PolicyAssign:
		errs = append(errs, s.validateAssign(path, checkPointer, needSchema)...)
	case s.Assign.configured():
		add("assign", "only the assign policy reads it, not %s", s.Policy)
	}
	if s.Policy == PolicyGapless && s.Version == "" {
		add("version", "the gapless policy needs the pointer to the producer's sequence")
	}
	if rows, most := s.DedupRows(), DedupBudgetBytes/DedupIDBytes; s.Limits.DedupIDs < 1 || s.Limits.DedupIDs*rows > most {
		add("limits.dedup_ids", "must be between 1 and %d with %d dedup rows per key (%d bytes an id within the %d bytes of table value the dedup memory may take), got %d",
			most/rows, rows, DedupIDBytes, DedupBudgetBytes, s.Limits.DedupIDs)
	}
	if s.Limits.DedupWindow < time.Second || s.Limits.DedupWindow > MaxDedupWindow {
		add("limits.dedup_window", "must be between 1s and %s, got %s", MaxDedupWindow, s.Limits.DedupWindow)
	}
	s.Replay.validate(s.Policy, add)
	byKey := s.Retention.ByKey()
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if d := byKey[key]; d < time.Second {
			add("retention."+key, "must be at least 1s, got %s", d)
		}
	}
	return errs
}

// validateAssign checks the assign section: every part's types have
// schemas and one part each, the pointers each part reads are set, and
// every event type of the stream has a part (or is ephemeral, or, with
// terminal states, may end the conversation), so that no event is
// accepted only to be rejected as of an unknown type.
func (s *Stream) validateAssign(path string, checkPointer func(sub, p string, required bool), needSchema func(sub, typ string)) []error {
	var errs []error
	add := func(sub, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s.assign.%s: %s", path, sub, fmt.Sprintf(format, args...)))
	}
	a := &s.Assign
	if len(a.Send.Types) == 0 {
		add("send.types", "the assign policy needs the types that send a message")
	}
	if len(a.Members.Added) == 0 {
		add("members.added", "the assign policy needs the types that add a member: only members send")
	}
	checkPointer("assign.send.sender", a.Send.Sender, true)
	checkPointer("assign.send.device", a.Send.Device, true)
	checkPointer("assign.send.client_message_id", a.Send.ClientMessageID, true)
	checkPointer("assign.send.body", a.Send.Body, false)
	checkPointer("assign.members.user", a.Members.User, true)
	receipts := len(a.Receipts.Read)+len(a.Receipts.Delivered) > 0
	checkPointer("assign.receipts.user", a.Receipts.User, receipts)
	checkPointer("assign.receipts.sequence", a.Receipts.Sequence, receipts)
	checkPointer("assign.receipts.device", a.Receipts.Device, false)
	checkPointer("assign.typing.user", a.Typing.User, a.Typing.Type != "")
	switch {
	case a.Typing.Type != "" && !s.IsEphemeral(a.Typing.Type):
		add("typing.type", "event type %q must be one of ephemeral_types: typing is never decided or stored", a.Typing.Type)
	case a.Typing.Type == "" && a.Typing.User != "":
		add("typing.type", "is required with assign.typing.user: it names the typing signal's event type")
	}
	if a.History != HistoryJoined && a.History != HistoryShared {
		add("history", "must be %s (a member reads what was sent while they were one) or %s (also what was sent before they joined), got %q", HistoryJoined, HistoryShared, a.History)
	}
	if s.Limits.Devices < 1 || s.Limits.Devices > 1000 {
		errs = append(errs, fmt.Errorf("in %s.limits.devices: the devices a member's delivery is recorded for must be between 1 and 1000, got %d", path, s.Limits.Devices))
	}
	part := map[string]string{}
	for _, group := range []struct {
		sub   string
		types []string
	}{
		{"send.types", a.Send.Types}, {"members.added", a.Members.Added}, {"members.removed", a.Members.Removed},
		{"receipts.read", a.Receipts.Read}, {"receipts.delivered", a.Receipts.Delivered},
	} {
		for i, typ := range group.types {
			sub := fmt.Sprintf("%s[%d]", group.sub, i)
			if other, ok := part[typ]; ok {
				add(sub, "event type %q already plays a part under assign.%s", typ, other)
				continue
			}
			part[typ] = group.sub
			needSchema("assign."+sub, typ)
			if s.IsEphemeral(typ) {
				add(sub, "event type %q is ephemeral: it is never decided", typ)
			}
		}
	}
	if !strings.Contains(a.MessageID, "{seq}") {
		add("message_id", "%q must contain {seq}, or two messages would share an id", a.MessageID)
	} else if rest := strings.NewReplacer("{key}", "", "{seq}", "").Replace(a.MessageID); strings.ContainsAny(rest, "{}") {
		add("message_id", "%q may name only {key} and {seq}", a.MessageID)
	}
	for _, typ := range slices.Sorted(maps.Keys(s.Schemas)) {
		if _, ok := part[typ]; ok || s.IsEphemeral(typ) || s.Terminal.Enabled() {
			continue
		}
		errs = append(errs, fmt.Errorf("in %s.schemas.%s: the assign policy has no part for event type %q: name it under assign.send.types, assign.members, assign.receipts or ephemeral_types", path, typ, typ))
	}
	return errs
}

// MessageIDOf returns the id of the message assigned seq under key: the
// template with each {key} and {seq} replaced, in one pass (a key that
// holds "{seq}" stays as it is). It runs for every message, so it builds
// the id directly rather than a strings.Replacer each time.
func (a *Assign) MessageIDOf(key string, seq int64) string {
	t := a.MessageID
	b := make([]byte, 0, len(t)+len(key)+20)
	for i := 0; i < len(t); {
		switch {
		case strings.HasPrefix(t[i:], "{key}"):
			b, i = append(b, key...), i+len("{key}")
		case strings.HasPrefix(t[i:], "{seq}"):
			b, i = strconv.AppendInt(b, seq, 10), i+len("{seq}")
		default:
			b, i = append(b, t[i]), i+1
		}
	}
	return string(b)
}

// KeyPointer returns the pointer to the entity key of an event type.
func (s *Stream) KeyPointer(eventType string) string {
	if p, ok := s.KeyByType[eventType]; ok {
		return p
	}
	return s.Key
}

// IsTerminal reports whether status is one of the stream's terminal states.
func (s *Stream) IsTerminal(status string) bool {
	return slices.Contains(s.Terminal.Values, status)
}

// IsEphemeral reports whether events of the type go to the ephemeral topic.
func (s *Stream) IsEphemeral(eventType string) bool {
	return slices.Contains(s.EphemeralTypes, eventType)
}

// SchemaBytes returns the JSON Schema of an event type: from the operator's
// folder when the file exists there, else from the embedded schemas.
func (s *Stream) SchemaBytes(eventType string) ([]byte, error) {
	file, ok := s.Schemas[eventType]
	if !ok {
		return nil, fmt.Errorf("stream %s has no schema for event type %q", s.Name, eventType)
	}
	if s.baseDir != "" && !filepath.IsAbs(file) {
		if data, err := os.ReadFile(filepath.Join(s.baseDir, file)); err == nil {
			return data, nil
		}
	}
	if filepath.IsAbs(file) {
		return os.ReadFile(file)
	}
	return schemas.Files.ReadFile(file)
}

// SecretKey returns the HMAC key of a secret of scheme: the decoded bytes
// of a whsec_ secret for standard-webhooks, the secret's own bytes for the
// others. Empty and short keys are refused.
func SecretKey(scheme, secret string) ([]byte, error) {
	if scheme == SchemeStandardWebhooks {
		return DecodeStandardSecret(secret)
	}
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("the secret is %d bytes; at least %d are needed", len(secret), MinSecretBytes)
	}
	return []byte(secret), nil
}

// DecodeStandardSecret turns a Standard Webhooks secret ("whsec_" + base64)
// into its key bytes, refusing empty and short keys.
func DecodeStandardSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, fmt.Errorf("a standard-webhooks secret starts with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("the part after whsec_ is not base64: %v", err)
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("the key is %d bytes; at least %d are needed", len(key), MinSecretBytes)
	}
	return key, nil
}
