package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/testenv"
)

// The flat Document is checked against a reference built on encoding/json's
// tokenizer, which shares no scanning code with Parse: the same bodies are
// accepted, build the same value, and are refused for the same rule at the
// same pointer; every pointer resolves to the same value or the same
// problem as in the generic tree.

// referenceDecode restates the strictness rules over encoding/json's
// tokens. ok is false for a body that is not JSON or not UTF-8, which Parse
// must refuse without a location being required.
func referenceDecode(body []byte) (v any, fe *FieldError, ok bool) {
	if !json.Valid(body) || !utf8.Valid(body) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		panic(err) // json.Valid said otherwise
	}
	v, fe = referenceValue(dec, tok, "", 0)
	return v, fe, true
}

func referenceValue(dec *json.Decoder, tok json.Token, pointer string, depth int) (any, *FieldError) {
	next := func() json.Token {
		t, err := dec.Token()
		if err != nil {
			panic(err)
		}
		return t
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, &FieldError{Pointer: pointer, Problem: tooDeep().(*FieldError).Problem}
		}
		if t == '[' {
			arr := []any{}
			for dec.More() {
				item, fe := referenceValue(dec, next(), pointer+"/"+strconv.Itoa(len(arr)), depth+1)
				if fe != nil {
					return nil, fe
				}
				arr = append(arr, item)
			}
			next() // ]
			return arr, nil
		}
		obj := map[string]any{}
		for dec.More() {
			key := next().(string)
			at := pointer + "/" + EscapePointer(key)
			if _, dup := obj[key]; dup {
				return nil, &FieldError{Pointer: at, Problem: "duplicate key"}
			}
			member, fe := referenceValue(dec, next(), at, depth+1)
			if fe != nil {
				return nil, fe
			}
			obj[key] = member
		}
		next() // }
		return obj, nil
	case json.Number:
		if problem := numberProblem(t.String(), !strings.ContainsAny(t.String(), ".eE")); problem != "" {
			return nil, &FieldError{Pointer: pointer, Problem: problem}
		}
	}
	return tok, nil
}

// referenceLookup resolves a pointer in the generic tree with the
// Document's rules: absent or null is missing, and a key with a case
// variant beside it is ambiguous.
func referenceLookup(root any, pointer string) (any, string) {
	if pointer == "" {
		return root, ""
	}
	cur := root
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		if obj, isObj := cur.(map[string]any); isObj {
			member, found := obj[token]
			if !found {
				return nil, problemMissing
			}
			for other := range obj {
				if other != token && strings.EqualFold(other, token) {
					return nil, "ambiguous: keys differing only in case"
				}
			}
			cur = member
			continue
		}
		arr, isArr := cur.([]any)
		i, err := strconv.Atoi(token)
		if !isArr || err != nil || i < 0 || i >= len(arr) {
			return nil, problemMissing
		}
		cur = arr[i]
	}
	if cur == nil {
		return nil, problemMissing
	}
	return cur, ""
}

// pointersOf lists the pointers to every value of v and, for each member,
// the same path with the key's case changed and with a key absent.
func pointersOf(v any, at string, out []string) []string {
	out = append(out, at)
	switch v := v.(type) {
	case map[string]any:
		for key, member := range v {
			out = pointersOf(member, at+"/"+EscapePointer(key), out)
			out = append(out, at+"/"+EscapePointer(strings.ToUpper(key)), at+"/"+EscapePointer(strings.ToLower(key)))
		}
		out = append(out, at+"/absent")
	case []any:
		for i, item := range v {
			out = pointersOf(item, at+"/"+strconv.Itoa(i), out)
		}
		out = append(out, at+"/"+strconv.Itoa(len(v)), at+"/-1")
	}
	return out
}

// checkAgainstReference fails when Parse and the reference disagree on
// body.
func checkAgainstReference(t testenv.Fataler, body []byte) {
	doc, err := Parse(body)
	want, wantErr, isJSON := referenceDecode(body)
	if !isJSON {
		if err == nil {
			doc.Release()
			t.Fatalf("accepted %q, which is not JSON or not UTF-8", body)
		}
		return
	}
	if wantErr != nil {
		var fe *FieldError
		if !errors.As(err, &fe) || *fe != *wantErr {
			t.Fatalf("%q: error %v, want %v", body, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("refused %q: %v", body, err)
	}
	defer doc.Release()
	if got := doc.Root().Any(); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: built %#v, want %#v", body, got, want)
	}
	for _, pointer := range pointersOf(want, "", nil) {
		v, err := doc.Lookup(pointer)
		wantValue, wantProblem := referenceLookup(want, pointer)
		var problem string
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			problem = fe.Problem
		}
		if problem != wantProblem || (err == nil && !reflect.DeepEqual(v.Any(), wantValue)) {
			t.Fatalf("%q at %q: got %#v (%v), want %#v (%q)", body, pointer, v.Any(), err, wantValue, wantProblem)
		}
	}
}

// drawBody draws JSON texts that hit the strictness rules often: keys from
// a small set with case variants and escaped spellings, numbers at the
// float64 limits, strings with escapes, deep nesting, and now and then a
// byte changed or dropped.
func drawBody(t *rapid.T) []byte {
	var b strings.Builder
	drawJSON(t, &b, 0)
	body := []byte(b.String())
	switch rapid.IntRange(0, 9).Draw(t, "damage") {
	case 0:
		if len(body) > 0 {
			i := rapid.IntRange(0, len(body)-1).Draw(t, "at")
			body[i] = rapid.SampledFrom([]byte{'"', '\\', '{', ']', ',', ':', 0xff, 0xc3, 0x01, 'e', '0'}).Draw(t, "byte")
		}
	case 1:
		if len(body) > 0 {
			i := rapid.IntRange(0, len(body)-1).Draw(t, "cut")
			body = append(body[:i], body[i+1:]...)
		}
	}
	return body
}

var (
	drawKeys    = []string{`"a"`, `"A"`, `"\u0061"`, `"b"`, `"user_id"`, `"User_ID"`, `"k"`, `"\u212a"`, `"é"`, `"É"`, `"a/b"`, `"m~n"`, `""`}
	drawNumbers = []string{"0", "-0", "1", "-12.50", "9007199254740991", "9007199254740992", "-9007199254740992", "1e400", "1e-400",
		"0.123456789012345678", "1.2345678901234567", "5e-324", "1.7976931348623157e308", "1E+2", "0.0e-999"}
	drawStrings = []string{`""`, `"x"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800x"`, `"é"`, "\"\xe2\x82\xac\""}
	drawSpace   = []string{"", "", " ", "\n\t", "\r\n  "}
)

func drawJSON(t *rapid.T, b *strings.Builder, depth int) {
	b.WriteString(rapid.SampledFrom(drawSpace).Draw(t, "space"))
	kind := rapid.IntRange(0, 7).Draw(t, "kind")
	if depth >= 4 && kind >= 6 {
		kind = 0
	}
	switch kind {
	case 0:
		b.WriteString(rapid.SampledFrom([]string{"true", "false", "null"}).Draw(t, "literal"))
	case 1, 2:
		b.WriteString(rapid.SampledFrom(drawNumbers).Draw(t, "number"))
	case 3, 4:
		b.WriteString(rapid.SampledFrom(drawStrings).Draw(t, "string"))
	case 5:
		// Nesting around the limit.
		n := rapid.SampledFrom([]int{MaxDepth - 1, MaxDepth, MaxDepth + 1}).Draw(t, "nest")
		b.WriteString(strings.Repeat("[", n) + strings.Repeat("]", n))
	case 6:
		b.WriteByte('[')
		for i := range rapid.IntRange(0, 4).Draw(t, "items") {
			if i > 0 {
				b.WriteByte(',')
			}
			drawJSON(t, b, depth+1)
		}
		b.WriteByte(']')
	case 7:
		b.WriteByte('{')
		members := rapid.IntRange(0, 6).Draw(t, "members")
		if rapid.IntRange(0, 9).Draw(t, "wide") == 0 {
			// Past linearKeys, where duplicates are found through a set.
			members = rapid.IntRange(linearKeys-1, linearKeys+8).Draw(t, "many")
		}
		for i := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(rapid.SampledFrom(drawKeys).Draw(t, "key") + ":")
			drawJSON(t, b, depth+1)
		}
		b.WriteByte('}')
	}
	b.WriteString(rapid.SampledFrom(drawSpace).Draw(t, "space"))
}

func TestParseAgreesWithReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkAgainstReference(t, drawBody(t))
	})
}

// FuzzParseAgreesWithReference explores beyond the drawn shapes.
func FuzzParseAgreesWithReference(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e","user_id":"u","User_ID":"v","sequence_number":1}`,
		`{"a":{"b":[1,{"\u212a":2,"k":3}],"a/b":{"m~n":null}}}`,
		`{"a":1,"\u0061":2}`, `[1,9007199254740992]`, "{\"a\":\"\xff\"}", `{"x":[[[[]]]]}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAgainstReference(t, body) })
}
