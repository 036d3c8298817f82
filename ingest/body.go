package ingest

import (
	"errors"
	"io"
	"net/http"
	"net/netip"
	"time"
)

// firstChunk is the buffer a body is first read into (or its length, when
// known and smaller): a webhook of typical size is read in one allocation
// of its own size, and a body that trickles in holds no more than twice
// what it has sent (at least this much) while it does.
const firstChunk = 4 << 10

// bodyGrace is how long a body may take to start: the minimum rate
// (http.min_body_rate) is asked of it only after, so that a lost packet
// or a slow start does not cut off a publisher.
const bodyGrace = time.Second

// Why a body was not read.
var (
	// errOverBudget: the body's first bytes do not fit in the in-flight
	// budget, and nothing of it was read.
	errOverBudget = errors.New("over the in-flight budget")
	// errOverBudgetWhileReading: a body outgrew the room left in the
	// budget (or its source's share) while it was read.
	errOverBudgetWhileReading = errors.New("over the in-flight budget while reading")
	// errTooLarge: the body is over the stream's limit.
	errTooLarge = errors.New("over the body limit")
)

// readBody reads r's body of at most limit bytes within the budget, as
// src's, and returns it with what it holds of the budget, to be given
// back when the body is no longer needed (on an error, nothing is held).
// The body takes from the budget what its buffer grows to as it is read,
// never its declared length before it arrives: what a connection holds
// is at most twice what it sent, or firstChunk. It must arrive at
// h.minRate after its first second, and within h.readTimeout.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, limit int64, src netip.Addr) ([]byte, hold, error) {
	known := r.ContentLength >= 0
	// A body of unknown length is read up to one byte over the limit, to
	// tell one at the limit from one over it.
	most := limit + 1
	if known {
		most = r.ContentLength
	}
	held, ok := h.budget.take(min(most, firstChunk), most, !known, src)
	if !ok {
		return nil, hold{}, errOverBudget
	}
	pace := h.newPace(w)
	body, err := h.readInto(r.Body, most, known, &held, pace)
	pace.done()
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
// a buffer that doubles as bytes arrive, each growth taken from the budget
// first, into held; before each read, pace sets when the next byte is due.
func (h *Handler) readInto(body io.Reader, most int64, exact bool, held *hold, pace *pace) ([]byte, error) {
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
			if next > held.bytes && !h.budget.grow(held, next-held.bytes) {
				return nil, errOverBudgetWhileReading
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		pace.due(int64(len(buf)))
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

// pace sets the read deadline of a body's connection so that the body
// arrives at least at rate bytes a second after its first second, and
// whole within the read timeout.
type pace struct {
	rc    *http.ResponseController
	rate  int64
	start time.Time
	// last is the deadline set; zero when none is (or can be) set.
	last, ceiling time.Time
}

func (h *Handler) newPace(w http.ResponseWriter) *pace {
	start := time.Now()
	return &pace{rc: http.NewResponseController(w), rate: h.minBodyRate, start: start, ceiling: start.Add(h.readTimeout)}
}

// due sets the deadline of the byte after the first received: it is
// late once the body has fallen behind the rate. A body of n bytes is
// thus due whole by its first second plus n bytes at the rate, its
// deadline derived from its declared length.
func (p *pace) due(received int64) {
	at := p.start.Add(bodyGrace + time.Duration(float64(received+1)/float64(p.rate)*float64(time.Second)))
	if at.After(p.ceiling) {
		at = p.ceiling
	}
	if at.Equal(p.last) {
		return
	}
	if err := p.rc.SetReadDeadline(at); err != nil {
		// A writer that cannot (a test's recorder): no pace.
		return
	}
	p.last = at
}

// done clears the deadline once the body is read: net/http goes on
// reading the connection in the background to notice a client leaving,
// and a deadline passing there would cancel the request.
func (p *pace) done() {
	if !p.last.IsZero() {
		_ = p.rc.SetReadDeadline(time.Time{})
	}
}
