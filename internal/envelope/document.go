package envelope

import (
	"encoding/json"
	"iter"
	"sync"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Value; the zero Value, which no lookup returns with a nil
// error, is KindInvalid.
const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// Document is a body Parse has read: its values in document order, each a
// token, a container followed by its members (an object's as key and value
// pairs). Readers walk it through Values; nothing in it is boxed, so reading
// a body allocates no more than its copy and the strings that had escapes.
type Document struct {
	// text is the body; strings without escapes and number literals are
	// slices of it, so they stay valid after Release.
	text   string
	tokens []token
	// unescaped are the strings that had escapes, decoded.
	unescaped []string
}

// token is one value of a Document, in 12 bytes: a body's tokens are
// written once each, and small ones copy in plain moves.
type token struct {
	kind Kind
	// truth is a boolean's value, and for a number whether its literal is
	// an integer (neither fraction nor exponent); escaped says a string is
	// unescaped[a] rather than text[a:b]; ascii says a string is all
	// ASCII, which spares most case-folding comparisons of keys.
	truth, escaped, ascii bool
	// A string's content or a number's literal is text[a:b]. A container
	// holds a members or items, and b is the index of the token after it
	// and all it holds.
	a, b int32
}

// documents are reused between bodies: the token array of the last body is
// usually the right size for the next.
var documents = sync.Pool{New: func() any { return new(Document) }}

// maxPooledTokens keeps one huge body from pinning its token array in the
// pool.
const maxPooledTokens = 1 << 12

// Release returns the Document for reuse. Its Values must not be used
// afterwards; strings read from them stay valid.
func (d *Document) Release() {
	if cap(d.tokens) > maxPooledTokens {
		return
	}
	clear(d.unescaped)
	*d = Document{tokens: d.tokens[:0], unescaped: d.unescaped[:0]}
	documents.Put(d)
}

// Root is the body's top-level value.
func (d *Document) Root() Value { return Value{doc: d} }

// str is the text of the string token at i.
func (d *Document) str(i int32) string {
	t := &d.tokens[i]
	if t.escaped {
		return d.unescaped[t.a]
	}
	return d.text[t.a:t.b]
}

// next is the index of the token after the value at i.
func (d *Document) next(i int32) int32 {
	if t := &d.tokens[i]; t.kind == KindArray || t.kind == KindObject {
		return t.b
	}
	return i + 1
}

// keys are the token indexes of the first n keys of the object at at.
func (d *Document) keys(at int32, n int) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		k := at + 1
		for range n {
			if !yield(k) {
				return
			}
			k = d.next(k + 1)
		}
	}
}

// isKey reports whether the string token at k is key, comparing lengths
// before reading the string.
func (d *Document) isKey(k int32, key string) bool {
	if t := &d.tokens[k]; !t.escaped && int(t.b-t.a) != len(key) {
		return false
	}
	return d.str(k) == key
}

// Value is one value of a Document.
type Value struct {
	doc *Document
	i   int32
}

// Kind is the value's JSON type.
func (v Value) Kind() Kind {
	if v.doc == nil {
		return KindInvalid
	}
	return v.doc.tokens[v.i].kind
}

// Text is a string's value or a number's literal; "" for other kinds.
func (v Value) Text() string {
	switch v.Kind() {
	case KindString:
		return v.doc.str(v.i)
	case KindNumber:
		t := &v.doc.tokens[v.i]
		return v.doc.text[t.a:t.b]
	}
	return ""
}

// Int is the value of an integer literal, one with neither fraction nor
// exponent; ok is false for any other value. Parse admits such literals
// only within ±(2^53−1), so each of a Document's has its value.
func (v Value) Int() (n int64, ok bool) {
	if v.Kind() != KindNumber || !v.doc.tokens[v.i].truth {
		return 0, false
	}
	return parseExactInteger(v.Text())
}

// Bool is a boolean's value; false for other kinds.
func (v Value) Bool() bool { return v.Kind() == KindBool && v.doc.tokens[v.i].truth }

// Len is the number of an object's members or an array's items; 0 for
// other kinds.
func (v Value) Len() int {
	if k := v.Kind(); k != KindObject && k != KindArray {
		return 0
	}
	return int(v.doc.tokens[v.i].a)
}

// Members are an object's keys and values in document order.
func (v Value) Members() iter.Seq2[string, Value] {
	return func(yield func(string, Value) bool) {
		if v.Kind() != KindObject {
			return
		}
		k := v.i + 1
		for range v.doc.tokens[v.i].a {
			if !yield(v.doc.str(k), Value{v.doc, k + 1}) {
				return
			}
			k = v.doc.next(k + 1)
		}
	}
}

// Items are an array's items in order.
func (v Value) Items() iter.Seq[Value] {
	return func(yield func(Value) bool) {
		if v.Kind() != KindArray {
			return
		}
		item := v.i + 1
		for range v.doc.tokens[v.i].a {
			if !yield(Value{v.doc, item}) {
				return
			}
			item = v.doc.next(item)
		}
	}
}

// Any builds the value as encoding/json with UseNumber would: objects are
// map[string]any, arrays []any, numbers json.Number. Only readers of the
// generic tree need it, such as the schema library on a body the fast
// check refused.
func (v Value) Any() any {
	switch v.Kind() {
	case KindObject:
		obj := make(map[string]any, v.Len())
		for key, member := range v.Members() {
			obj[key] = member.Any()
		}
		return obj
	case KindArray:
		// Never nil, as encoding/json builds it: an empty array is not null.
		arr := make([]any, 0, v.Len())
		for item := range v.Items() {
			arr = append(arr, item.Any())
		}
		return arr
	case KindString:
		return v.Text()
	case KindNumber:
		return json.Number(v.Text())
	case KindBool:
		return v.Bool()
	}
	return nil
}
