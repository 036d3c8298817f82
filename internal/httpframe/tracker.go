package httpframe

import (
	"bytes"
	"net/http"
	"strconv"
)

// tracker follows the requests of one connection's bytes as net/http
// frames them: a head (request line, header lines, an empty line), then
// a body of Content-Length bytes or chunks, then the next head. It needs
// to agree with net/http only on requests net/http serves: where net/http
// refuses bytes it closes the connection, and where the tracker cannot
// follow them it gives up and refuses the connection's requests (fail
// closed).
type tracker struct {
	state state
	// line holds the start of the line being read, at most maxLine bytes
	// (over marks that more was left out).
	line []byte
	over bool
	// remaining counts the bytes of the body or chunk being read, crlf
	// those of the CRLF after a chunk.
	remaining uint64
	crlf      int

	// The head being read.
	proto      string
	lengths    []string
	encodings  []string
	lastFramed bool // the last header line was Content-Length or Transfer-Encoding
}

type state uint8

const (
	requestLine state = iota
	headerLine
	fixedBody
	chunkSize
	chunkData
	chunkEnd
	trailerLine
	refused
)

// maxLine is the most of a line kept: a request line with a long URL (a
// token in the query), and more than any header name, Content-Length or
// chunk size net/http accepts needs.
const maxLine = 16 << 10

// keptLine is the line buffer's capacity kept between heads, so that one
// long line does not stay with the connection.
const keptLine = 1 << 10

// feed follows p; false once the connection is to be refused.
func (t *tracker) feed(p []byte) bool {
	for len(p) > 0 && t.state != refused {
		switch t.state {
		case fixedBody, chunkData:
			n := uint64(len(p))
			if n > t.remaining {
				n = t.remaining
			}
			t.remaining -= n
			p = p[n:]
			if t.remaining == 0 {
				if t.state == fixedBody {
					t.state = requestLine
				} else {
					t.state, t.crlf = chunkEnd, 0
				}
			}
		case chunkEnd:
			if p[0] != "\r\n"[t.crlf] {
				t.state = refused
				break
			}
			p = p[1:]
			if t.crlf++; t.crlf == 2 {
				t.state = chunkSize
			}
		default:
			i := bytes.IndexByte(p, '\n')
			end := i
			if i < 0 {
				end = len(p)
			}
			if room := maxLine - len(t.line); end > room {
				t.line = append(t.line, p[:room]...)
				t.over = true
			} else {
				t.line = append(t.line, p[:end]...)
			}
			if i < 0 {
				return true
			}
			p = p[i+1:]
			t.endLine()
			t.line, t.over = t.line[:0], false
			if cap(t.line) > keptLine && t.state != headerLine {
				t.line = nil
			}
		}
	}
	return t.state != refused
}

// endLine acts on the line just read, without its LF.
func (t *tracker) endLine() {
	line, cr := bytes.CutSuffix(t.line, []byte("\r"))
	switch t.state {
	case requestLine:
		_, rest, ok1 := bytes.Cut(line, []byte(" "))
		_, proto, ok2 := bytes.Cut(rest, []byte(" "))
		if _, _, ok := http.ParseHTTPVersion(string(proto)); !ok1 || !ok2 || !ok || t.over {
			t.state = refused
			return
		}
		t.proto, t.lengths, t.encodings, t.lastFramed = string(proto), t.lengths[:0], t.encodings[:0], false
		t.state = headerLine
	case headerLine:
		switch {
		case len(line) == 0:
			t.endHead()
		case line[0] == ' ' || line[0] == '\t':
			// An obsolete folded line continues the header before it.
			if t.lastFramed {
				t.state = refused
			}
		default:
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				t.state = refused
				return
			}
			length := bytes.EqualFold(name, []byte("Content-Length"))
			encoding := bytes.EqualFold(name, []byte("Transfer-Encoding"))
			t.lastFramed = length || encoding
			switch {
			case t.lastFramed && t.over:
				t.state = refused
			case length:
				t.lengths = append(t.lengths, string(bytes.Trim(value, " \t")))
			case encoding:
				t.encodings = append(t.encodings, string(bytes.Trim(value, " \t")))
			}
		}
	case chunkSize:
		// net/http wants CRLF here, and a size of at most 16 hex digits
		// before any extension.
		size, _, _ := bytes.Cut(line, []byte(";"))
		size = bytes.TrimRight(size, " \t")
		n, err := strconv.ParseUint(string(size), 16, 64)
		if !cr || t.over || err != nil || len(size) > 16 {
			t.state = refused
			return
		}
		if n == 0 {
			t.state = trailerLine
			return
		}
		t.state, t.remaining = chunkData, n
	case trailerLine:
		if len(line) == 0 {
			t.state = requestLine
		}
	}
}

// endHead decides how the head just read frames its body.
func (t *tracker) endHead() {
	major, minor, _ := http.ParseHTTPVersion(t.proto)
	http11 := major > 1 || major == 1 && minor >= 1
	switch {
	case len(t.encodings) > 0 && (len(t.lengths) > 0 || !http11):
		// The ambiguity RFC 9112 §6.3 asks a server to refuse; an
		// HTTP/1.0 Transfer-Encoding is faulty framing (§6.1).
		t.state = refused
	case len(t.encodings) > 0:
		// net/http takes one Transfer-Encoding, chunked, and refuses
		// and closes on any other.
		if len(t.encodings) != 1 || !bytes.EqualFold([]byte(t.encodings[0]), []byte("chunked")) {
			t.state = refused
			return
		}
		t.state = chunkSize
	case len(t.lengths) > 0:
		n, err := strconv.ParseUint(t.lengths[0], 10, 63)
		for _, l := range t.lengths[1:] {
			if l != t.lengths[0] {
				err = strconv.ErrSyntax
			}
		}
		if err != nil {
			t.state = refused
			return
		}
		t.state, t.remaining = fixedBody, n
		if n == 0 {
			t.state = requestLine
		}
	default:
		t.state = requestLine
	}
}
