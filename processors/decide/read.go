package decide

import (
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// reader reads what the rules need of an event from its body, through the
// stream's catalogue entry: the catalogue fields, the device and its value
// (devices), whether the event is terminal, and an assign event's member,
// client key, sequence and receiving device.
type reader struct {
	stream *config.Stream
	// roles is the part of each event type (assign).
	roles map[string]config.AssignRole
	// derivePointer points at the field device rows derive the entity's
	// value from (devices), built once.
	derivePointer string
}

// Read reads the event in doc. fallbackID is the event id when the body
// has none (the delivery id ingest recorded). The caller sets what the body
// does not hold: the body itself, received_at and the input position.
// Strings of the event are the document's and stay valid after its
// release.
func (r *Rules) Read(doc *envelope.Document, fallbackID string) (Event, error) {
	s := r.stream
	fields, err := doc.Extract(s, fallbackID)
	if err != nil {
		return Event{}, err
	}
	ev := Event{Fields: fields}
	if s.Devices.Enabled() {
		if ev.Device, err = doc.OptionalString(s.Devices.Field); err != nil {
			return Event{}, err
		}
		if ev.Device != "" {
			if ev.Value, err = doc.OptionalString(r.reader.derivePointer); err != nil {
				return Event{}, err
			}
		}
	}
	if s.Terminal.Enabled() {
		status, _ := doc.Lookup(s.Terminal.Field)
		ev.Terminal = status.Kind() == envelope.KindString && s.IsTerminal(status.Text())
	}
	if s.Policy == config.PolicyAssign {
		r.reader.assignFields(doc, &ev)
	}
	return ev, nil
}

// assignFields reads the fields of the part ev's type plays. The edge has
// validated them; a body a foreign producer wrote to `<stream>.in` may lack
// them or hold another type, and a field that cannot be read is taken as
// empty, so such an event is decided (a send from no member is rejected),
// never stuck.
func (r reader) assignFields(doc *envelope.Document, ev *Event) {
	a := &r.stream.Assign
	text := func(pointer string) string {
		v, _ := doc.OptionalString(pointer)
		return v
	}
	switch r.roles[ev.Type] {
	case config.RoleSend:
		ev.Member = text(a.Send.Sender)
		ev.ClientKey = text(a.Send.Device) + "\x00" + text(a.Send.ClientMessageID)
	case config.RoleMemberAdded, config.RoleMemberRemoved:
		ev.Member = text(a.Members.User)
	case config.RoleReceiptRead, config.RoleReceiptDelivered:
		ev.Member = text(a.Receipts.User)
		if a.Receipts.Device != "" {
			ev.Device = text(a.Receipts.Device)
		}
		if v, err := doc.Lookup(a.Receipts.Sequence); err == nil {
			ev.Seq, _ = v.Int()
		}
	}
}
