package realtime

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Cursor is a position in a stream's `<stream>.state` topic: the topic's
// id, its epoch (a topic deleted and created again has a new one), and per
// partition the offset of the next change. It covers every change before
// those offsets. A client never builds one; it keeps the last it received
// and hands it back to resume, on this bridge or any other.
type Cursor struct {
	Epoch   [16]byte
	Offsets []int64
}

// The first byte of an encoded position says what it is, so the format can
// change without an old one being misread, and a sync token is never taken
// for an events cursor or the other way round: both are positions in the
// state topic, but a sync token also stands for the messages the client
// took with it.
const (
	cursorVersion    = 1
	syncTokenVersion = 2
)

// String encodes the cursor: base64url (unpadded) of the version byte, the
// epoch, the partition count and each offset, as uvarints.
func (c Cursor) String() string {
	return string(c.appendAs(nil, cursorVersion))
}

// appendAs appends the position encoded with the first byte version.
func (c Cursor) appendAs(b []byte, version byte) []byte {
	var raw [256]byte
	r := append(raw[:0], version)
	r = append(r, c.Epoch[:]...)
	r = binary.AppendUvarint(r, uint64(len(c.Offsets)))
	for _, o := range c.Offsets {
		r = binary.AppendUvarint(r, uint64(o))
	}
	return base64.RawURLEncoding.AppendEncode(b, r)
}

var errMalformedCursor = errors.New("malformed cursor")

// ParseCursor decodes a cursor String gave.
func ParseCursor(s string) (Cursor, error) { return parseAs(s, cursorVersion) }

// parseAs decodes a position appendAs encoded with the first byte version.
func parseAs(s string, version byte) (Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) < 1+16+1 || raw[0] != version {
		return Cursor{}, errMalformedCursor
	}
	var c Cursor
	copy(c.Epoch[:], raw[1:17])
	rest := raw[17:]
	n, k := binary.Uvarint(rest)
	// Every offset takes at least a byte, which bounds what a forged
	// count can make the decoder allocate.
	if k <= 0 || n > uint64(len(rest)-k) {
		return Cursor{}, errMalformedCursor
	}
	rest = rest[k:]
	c.Offsets = make([]int64, n)
	for i := range c.Offsets {
		o, k := binary.Uvarint(rest)
		if k <= 0 || o > 1<<62 {
			return Cursor{}, errMalformedCursor
		}
		c.Offsets[i], rest = int64(o), rest[k:]
	}
	if len(rest) > 0 {
		return Cursor{}, errMalformedCursor
	}
	return c, nil
}

// Clone returns a copy that shares nothing with c.
func (c Cursor) Clone() Cursor {
	return Cursor{Epoch: c.Epoch, Offsets: slices.Clone(c.Offsets)}
}

// goneError says why a cursor cannot resume on this stream; the answer is
// 410 Gone and a new snapshot.
type goneError struct{ reason string }

func (e goneError) Error() string { return e.reason }

func gone(format string, args ...any) error { return goneError{fmt.Sprintf(format, args...)} }
