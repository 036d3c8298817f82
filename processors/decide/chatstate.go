package decide

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/driftguard/driftguard/internal/record"
)

// chatState is a conversation's public state, the `state` of its
// `<stream>.state` records: written for every message and receipt, so it
// is encoded by hand, byte for byte what json.Marshal writes for the
// struct below (TestChatStateIsEncodingJSON), without reflection.
//
//	struct {
//		LastSeq     int64                 `json:"last_seq"`
//		Members     []string              `json:"members"`
//		Membership  map[string][]Interval `json:"membership,omitempty"`
//		Cursors     map[string]Cursor     `json:"cursors,omitempty"`
//		LastMessage json.RawMessage       `json:"last_message,omitempty"`
//	}
func appendChatState(b []byte, lastSeq int64, c *Conversation, lastMessage json.RawMessage) []byte {
	b = append(b, `{"last_seq":`...)
	b = strconv.AppendInt(b, lastSeq, 10)
	b = append(b, `,"members":[`...)
	for i, m := range c.Members {
		if i > 0 {
			b = append(b, ',')
		}
		b = record.AppendJSONString(b, m, true)
	}
	b = append(b, ']')
	if len(c.Membership) > 0 {
		b = append(b, `,"membership":{`...)
		for i, user := range SortedKeys(c.Membership, c.Members) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(record.AppendJSONString(b, user, true), ':')
			ivs := c.Membership[user]
			if ivs == nil {
				b = append(b, "null"...)
				continue
			}
			b = append(b, '[')
			for j, iv := range ivs {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(append(b, `{"from":`...), iv.From, 10)
				if iv.To != 0 {
					b = strconv.AppendInt(append(b, `,"to":`...), iv.To, 10)
				}
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if len(c.Cursors) > 0 {
		b = append(b, `,"cursors":{`...)
		for i, user := range SortedKeys(c.Cursors, c.Members) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCursor(append(record.AppendJSONString(b, user, true), ':'), c.Cursors[user])
		}
		b = append(b, '}')
	}
	if len(lastMessage) > 0 {
		b = appendCompactJSON(append(b, `,"last_message":`...), lastMessage)
	}
	return append(b, '}')
}

// appendCursor writes one member's cursor as json.Marshal does.
func appendCursor(b []byte, cur Cursor) []byte {
	b = append(b, '{')
	sep := false
	field := func(name string) {
		if sep {
			b = append(b, ',')
		}
		b, sep = append(b, name...), true
	}
	if cur.Read != 0 {
		field(`"read":`)
		b = strconv.AppendInt(b, cur.Read, 10)
	}
	if cur.Delivered != 0 {
		field(`"delivered":`)
		b = strconv.AppendInt(b, cur.Delivered, 10)
	}
	if len(cur.Devices) > 0 {
		field(`"devices":{`)
		for i, dev := range slices.Sorted(maps.Keys(cur.Devices)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(record.AppendJSONString(b, dev, true), `:{"delivered":`...)
			b = append(strconv.AppendInt(b, cur.Devices[dev].Delivered, 10), '}')
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendCompactJSON appends a valid JSON value as json.Marshal writes a
// json.RawMessage: compacted, with <, >, &, U+2028 and U+2029 escaped.
func appendCompactJSON(b []byte, v json.RawMessage) []byte {
	start := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, v); err != nil {
		// Not valid JSON: the bodies here were parsed on the way in, so
		// this is a value of some other origin; json.Marshal's own path
		// reports nothing either (the caller ignores its error).
		return append(b[:start], "null"...)
	}
	b = buf.Bytes()
	if bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
		var escaped bytes.Buffer
		json.HTMLEscape(&escaped, b[start:])
		b = append(b[:start], escaped.Bytes()...)
	}
	return b
}

// SortedKeys returns m's keys in order: members (sorted) when they are
// exactly m's keys, as they mostly are for a conversation's membership and
// cursors, which spares a sort for every message.
func SortedKeys[V any](m map[string]V, members []string) []string {
	if len(m) == len(members) {
		all := true
		for _, u := range members {
			if _, ok := m[u]; !ok {
				all = false
				break
			}
		}
		if all {
			return members
		}
	}
	return slices.Sorted(maps.Keys(m))
}
