package ingest

import (
	"errors"
	"io"
	"net/http"
)

// firstChunk is the buffer a body is first read into (or its length, when
// known and smaller): a webhook of typical size is read in one allocation
// of its own size, and a body that trickles in holds no more than twice
// what it has sent (at least this much) while it does.
const firstChunk = 4 << 10

// Why a body was not read.
var (
	// errOverBudget: the body's bytes do not fit in the in-flight budget,
	// and nothing of it was read.
	errOverBudget = errors.New("over the in-flight budget")
	// errOverBudgetWhileReading: a body of unknown length outgrew the room
	// left in the budget while it was read.
	errOverBudgetWhileReading = errors.New("over the in-flight budget while reading")
	// errTooLarge: the body is over the stream's limit.
	errTooLarge = errors.New("over the body limit")
)

// readBody reads r's body of at most limit bytes within the budget, and
// returns it with what it holds of the budget, to be given back when the
// body is no longer needed (on an error, nothing is held). A body of known
// length takes its length from the budget before a byte is read; one of
// unknown length takes what its buffer grows to, as it is read.
func (h *Handler) readBody(r *http.Request, limit int64) ([]byte, hold, error) {
	known := r.ContentLength >= 0
	// A body of unknown length is read up to one byte over the limit, to
	// tell one at the limit from one over it.
	most := limit + 1
	if known {
		most = r.ContentLength
	}
	take := most
	if !known {
		take = min(most, firstChunk)
	}
	held, ok := h.budget.take(take, !known)
	if !ok {
		return nil, hold{}, errOverBudget
	}
	body, err := h.readInto(r.Body, most, known, &held)
	if err == nil && !known && int64(len(body)) > limit {
		err = errTooLarge
	}
	if err != nil {
		h.budget.give(held)
		return nil, hold{}, err
	}
	return body, held, nil
}

// readInto reads up to most bytes from body, all of them when exact, into
// a buffer that doubles as bytes arrive; for a body of unknown length each
// growth is taken from the budget first, into held.
func (h *Handler) readInto(body io.Reader, most int64, exact bool, held *hold) ([]byte, error) {
	buf := make([]byte, 0, min(most, firstChunk))
	for {
		if exact && int64(len(buf)) == most {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			if int64(len(buf)) == most {
				// Unknown length, one byte over the limit: enough to know.
				return buf, nil
			}
			next := min(2*int64(cap(buf)), most)
			if !exact && next > held.bytes && !h.budget.grow(held, next-held.bytes) {
				return nil, errOverBudgetWhileReading
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF && exact && int64(len(buf)) < most:
			return nil, io.ErrUnexpectedEOF
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}
